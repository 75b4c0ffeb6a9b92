package testenv

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
)

// binaryPackage is the command the process tests run.
const binaryPackage = "github.com/searchsync/searchsync/cmd/searchsync"

var (
	binaryOnce sync.Once
	binaryPath string
	binaryErr  error
)

// Binary returns the path of a searchsync binary built from the module's
// current source. The packages whose tests run `searchsync` processes
// (cmd/searchsync, relay, sink/nats, e2e) share one build: it is kept in
// the user's cache directory under a hash of every file that goes into it
// (the Go and embedded files of the main module's packages it imports, the
// versions of the other modules, the Go version and build environment), so
// a second package, or a second run of an unchanged tree, only hashes.
// Entries not used for a day are removed.
func Binary() (string, error) {
	binaryOnce.Do(func() { binaryPath, binaryErr = buildBinary() })
	return binaryPath, binaryErr
}

func buildBinary() (string, error) {
	key, err := sourceHash(binaryPackage)
	if err != nil {
		return "", err
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	root := filepath.Join(base, "searchsync-test-bin")
	dir := filepath.Join(root, key[:24])
	bin := filepath.Join(dir, "searchsync")
	if _, err := os.Stat(bin); err == nil {
		now := time.Now()
		_ = os.Chtimes(dir, now, now) // in use: keep it from the pruning below (best effort)
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("testenv: binary cache: %w", err)
	}
	// Build beside the final name and rename: a package whose tests start
	// at the same moment builds too, and either result is the same binary.
	tmp, err := os.CreateTemp(dir, "searchsync-*.tmp")
	if err != nil {
		return "", fmt.Errorf("testenv: binary cache: %w", err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	out, err := exec.Command("go", "build", "-o", tmp.Name(), binaryPackage).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("testenv: go build %s: %w\n%s", binaryPackage, err, out)
	}
	if err := os.Rename(tmp.Name(), bin); err != nil {
		return "", fmt.Errorf("testenv: binary cache: %w", err)
	}
	prune(root, dir)
	return bin, nil
}

// prune removes the cache entries other than keep that were not used for a
// day (another work tree's tests may be using a recent one right now).
func prune(root, keep string) {
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		p := filepath.Join(root, e.Name())
		info, err := e.Info()
		if err != nil || p == keep || time.Since(info.ModTime()) < 24*time.Hour {
			continue
		}
		os.RemoveAll(p)
	}
}

// sourceHash hashes what `go build pkg` reads: the Go, cgo and embedded
// files of each main-module package in pkg's dependencies, the path and
// version of every other module, the Go version and the environment that
// changes a build.
func sourceHash(pkg string) (string, error) {
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Dir,Standard,GoFiles,CgoFiles,EmbedFiles,Module", pkg)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("testenv: go list %s: %w\n%s", pkg, err, stderr.Bytes())
	}
	h := sha256.New()
	fmt.Fprintln(h, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	for _, v := range []string{"CGO_ENABLED", "GOFLAGS", "GOEXPERIMENT", "GOAMD64", "CC"} {
		fmt.Fprintf(h, "%s=%s\n", v, os.Getenv(v))
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath, Dir               string
			Standard                      bool
			GoFiles, CgoFiles, EmbedFiles []string
			Module                        *struct {
				Path, Version string
				Main          bool
			}
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return "", fmt.Errorf("testenv: go list %s: %w", pkg, err)
		}
		fmt.Fprintln(h, "package", p.ImportPath)
		switch {
		case p.Standard:
			// runtime.Version covers it.
		case p.Module != nil && !p.Module.Main:
			fmt.Fprintln(h, "module", p.Module.Path, p.Module.Version)
		default:
			for _, list := range [][]string{p.GoFiles, p.CgoFiles, p.EmbedFiles} {
				for _, f := range list {
					b, err := os.ReadFile(filepath.Join(p.Dir, f))
					if err != nil {
						return "", fmt.Errorf("testenv: hash %s: %w", f, err)
					}
					fmt.Fprintf(h, "file %s %d\n", f, len(b))
					h.Write(b)
				}
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// MainWithBinary is the TestMain of a package whose tests run the binary:
// it sets *path to Binary() (or exits 1 with the build's error) and runs
// the tests.
func MainWithBinary(m *testing.M, path *string) {
	p, err := Binary()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*path = p
	os.Exit(m.Run())
}
