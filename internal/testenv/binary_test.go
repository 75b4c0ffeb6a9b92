package testenv_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/searchsync/searchsync/internal/testenv"
)

// TestBinaryIsTheCurrentCommand: the shared build runs and is the
// searchsync command (its help names the subcommands).
func TestBinaryIsTheCurrentCommand(t *testing.T) {
	bin, err := testenv.Binary()
	if err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command(bin, "--help").CombinedOutput()
	if !strings.Contains(string(out), "migrate") || !strings.Contains(string(out), "run") {
		t.Fatalf("%s --help:\n%s", bin, out)
	}
}
