package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/searchsync/searchsync/internal/testenv"
)

// binary is the searchsync binary the tests run (testenv.Binary: one build
// shared with the other packages that run it).
var binary string

func TestMain(m *testing.M) { testenv.MainWithBinary(m, &binary) }

// runCLI runs the binary with args and extra environment and returns stdout,
// stderr and the exit code.
func runCLI(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %v: %v", args, err)
	}
	return stdout.String(), stderr.String(), code
}

// writeConfig writes a configuration file into the test's temp dir.
func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "searchsync.yaml")
	if err := os.WriteFile(f, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}
