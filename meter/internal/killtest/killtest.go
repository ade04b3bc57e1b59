// Package killtest runs a crash test: the test binary re-executes itself as a
// child process running one test, reads the lines the child prints, and
// kills it with SIGKILL mid-stream.
package killtest

import (
	"bufio"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// Run starts os.Args[0] running only the test named test, with env added to
// the environment, and passes each line the child prints on stdout to kill;
// when kill returns true the child is sent SIGKILL. Run reads on to the end
// of the child's output (the lines it wrote before it died) and returns every
// line. It fails t if the child ended before the kill or by another cause.
//
// The child should print each line with one write(2) shorter than PIPE_BUF
// (os.Stdout.WriteString of the whole line), so that the lines of concurrent
// goroutines never interleave.
func Run(t *testing.T, test string, env []string, kill func(line string) bool) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	var lines []string
	killed := false
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if !killed && kill(sc.Text()) {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed = true
		}
	}
	err = cmd.Wait()
	if !killed {
		t.Fatalf("the child ended before the kill (%d lines): %v", len(lines), err)
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want killed by SIGKILL", cmd.ProcessState)
	}
	return lines
}

// Say prints line and a newline on stdout in one write(2).
func Say(line string) { os.Stdout.WriteString(line + "\n") }
