package spool

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"sluice/meter"
	"sluice/meter/internal/killtest"
)

// The kill -9 test runs this test binary again as a child process
// (TestKill9Child, selected with -test.run and enabled by these variables),
// which appends records from several goroutines and prints each id whose
// Append returned nil; the parent SIGKILLs it mid-stream, reopens the spool
// and checks every printed id.
const (
	envKill9Dir  = "SLUICE_SPOOL_KILL9_DIR"
	envKill9Mode = "SLUICE_SPOOL_KILL9_MODE"
)

// kill9Options are the child's: small segments, so the kill often lands
// near a rotation; a bound the test never reaches, so nothing is dropped.
var kill9Options = Options{Sync: meter.SyncNone, SegmentBytes: 8 << 10, MaxBytes: 256 << 20}

// Child output lines:
//
//	a <id>        Append(<id>) returned nil
//	s <id> ...    Ack of a batch with these ids is about to be called
//	k             that Ack returned nil
func TestKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	tests := []struct {
		name, mode string
	}{
		{name: "appenders only", mode: "append"},
		{name: "appenders and a shipper", mode: "ship"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			killAfter := 200 + rand.IntN(4000) // appended records seen before the kill
			appended, acked, inFlight := runKill9Child(t, dir, tt.mode, killAfter)

			s := openT(t, dir, kill9Options)
			seen := map[string]int{}
			for _, id := range drain(t, s, 256) {
				seen[id]++
				if seen[id] > 1 {
					t.Fatalf("%s delivered twice after the restart", id)
				}
			}
			missing := 0
			for _, id := range appended {
				switch {
				case acked[id]:
					if seen[id] != 0 {
						t.Errorf("%s was acknowledged before the kill and delivered again", id)
					}
				case inFlight[id]:
					// Its Ack was under way at the kill: either outcome is right.
				case seen[id] != 1:
					missing++
					if missing <= 5 {
						t.Errorf("%s: Append returned nil before the kill, found %d times after it", id, seen[id])
					}
				}
			}
			if missing > 0 {
				t.Fatalf("%d of %d acknowledged appends lost", missing, len(appended))
			}
			t.Logf("killed after %d appends (%d acknowledged by the shipper, %d in an Ack under way); %d records after the restart, %d repairs",
				len(appended), len(acked), len(inFlight), len(seen), s.Stats().Repairs)
		})
	}
}

// runKill9Child runs the child, SIGKILLs it once it has printed killAfter
// appended ids, and returns what it printed up to its death.
func runKill9Child(t *testing.T, dir, mode string, killAfter int) (appended []string, acked, inFlight map[string]bool) {
	t.Helper()
	env := []string{envKill9Dir + "=" + dir, envKill9Mode + "=" + mode}
	n := 0
	lines := killtest.Run(t, "TestKill9Child", env, func(line string) bool {
		if strings.HasPrefix(line, "a ") {
			n++
		}
		return n >= killAfter
	})
	acked, inFlight = map[string]bool{}, map[string]bool{}
	var pending []string // ids of the batch whose Ack is under way
	for _, line := range lines {
		switch {
		case strings.HasPrefix(line, "a "):
			appended = append(appended, line[2:])
		case strings.HasPrefix(line, "s "):
			pending = strings.Fields(line[2:])
		case line == "k":
			for _, id := range pending {
				acked[id] = true
			}
			pending = nil
		}
	}
	for _, id := range pending {
		inFlight[id] = true
	}
	return appended, acked, inFlight
}

// TestKill9Child is the child of TestKill9; it does nothing in a normal run.
func TestKill9Child(t *testing.T) {
	dir := os.Getenv(envKill9Dir)
	if dir == "" {
		t.Skip("only run by TestKill9")
	}
	s, err := Open(dir, kill9Options)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	say := killtest.Say
	const writers = 4
	for w := range writers {
		go func() {
			for i := 0; ; i++ {
				r := record(0)
				r.ID = "w" + strconv.Itoa(w) + "-" + strconv.Itoa(i)
				if err := s.Append(r); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(2)
				}
				say("a " + r.ID)
			}
		}()
	}
	if os.Getenv(envKill9Mode) == "ship" {
		go func() {
			for {
				b, err := s.Next(50)
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(2)
				}
				if b.Len() == 0 {
					time.Sleep(time.Millisecond)
					continue
				}
				var ids []string
				for _, p := range b.Records {
					r, err := meter.Decode(p)
					if err != nil {
						fmt.Fprintln(os.Stderr, err)
						os.Exit(2)
					}
					ids = append(ids, r.ID)
				}
				say("s " + strings.Join(ids, " "))
				if err := s.Ack(b); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(2)
				}
				say("k")
			}
		}()
	}
	// The parent kills this process; a child left over by a dead parent
	// ends on its own.
	time.Sleep(2 * time.Minute)
	os.Exit(3)
}
