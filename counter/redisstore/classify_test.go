package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Every error text Redis answers with is given a kind; the texts are those
// of Redis 7 (CLUSTERDOWN, TRYAGAIN and BUSY are hard to provoke for real;
// failure_test.go provokes OOM, NOAUTH, WRONGPASS, READONLY, MASTERDOWN and a
// script error on a real server, and LOADING from a stand-in).
func TestClassify(t *testing.T) {
	tests := []struct {
		err  error
		kind string
	}{
		{redis.ErrClosed, kindClosed},
		{redis.ErrPoolTimeout, kindPool},
		{context.DeadlineExceeded, kindTimeout},
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, kindConnection},
		{io.EOF, kindConnection},
		{errors.New("LOADING Redis is loading the dataset in memory"), kindServer},
		{errors.New("CLUSTERDOWN The cluster is down"), kindServer},
		{errors.New("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), kindServer},
		{errors.New("TRYAGAIN Multiple keys request during rehashing of slot"), kindServer},
		{errors.New("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."), kindServer},
		{errors.New("MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk."), kindServer},
		{errors.New("ERR max number of clients reached"), kindServer},
		{scriptError("READONLY You can't write against a read only replica."), kindServer},
		{errors.New("NOAUTH Authentication required."), kindAuth},
		{errors.New("WRONGPASS invalid username-password pair or user is disabled."), kindAuth},
		{errors.New("NOPERM User sluice has no permissions to run the 'evalsha' command"), kindAuth},
		{scriptError("OOM command not allowed when used memory > 'maxmemory'."), kindOOM},
		{errors.New("OOM command not allowed when used memory > 'maxmemory'."), kindOOM},
		{errors.New("CROSSSLOT Keys in request don't hash to the same slot"), kindCrossSlot},
		{errors.New("NOSCRIPT No matching script. Please use EVAL."), kindScript},
		{scriptError("user_script:12: attempt to perform arithmetic on a nil value"), kindScript},
		{scriptError("ERR value is not an integer or out of range"), kindScript},
		{fmt.Errorf("x: %w", errors.New("ERR user_script:1: Script attempted to access nonexistent global variable 'x' script: 6b1e, on @user_script:1.")), kindScript},
		{fmt.Errorf("%w: batch reply for 2 operations: string", errMalformedReply), kindReply},
		{errors.New("BUSYKEY Target key name already exists."), kindOther},
		{errors.New("ERR Protocol error: invalid bulk length"), kindOther},
	}
	for _, tc := range tests {
		if kind := classify(tc.err); kind != tc.kind {
			t.Errorf("classify(%v) = %s, want %s", tc.err, kind, tc.kind)
		}
	}
}
