package admission

import (
	"fmt"
	"time"
)

// Reason says why a request was refused.
type Reason uint8

const (
	// ReasonQueueFull: the application's queued work in the class would pass
	// the class's MaxQueuedWork. Waiting helps: the queue drains.
	ReasonQueueFull Reason = iota + 1
	// ReasonDeadlineUnmeetable: the expected start is already past the
	// request's deadline; refused at once instead of after waiting.
	ReasonDeadlineUnmeetable
	// ReasonDeadlineExceeded: the deadline passed while the request waited;
	// it left the queue having been charged nothing.
	ReasonDeadlineExceeded
	// ReasonTooLarge: the request can never run on the target (its tokens in
	// flight exceed the target's bound, or its class's cap of it).
	ReasonTooLarge
	// ReasonUnknownClass: the ticket names a class the configuration lacks
	// (a wiring error: classes are granted by configuration).
	ReasonUnknownClass
)

func (r Reason) String() string {
	switch r {
	case ReasonQueueFull:
		return "queue_full"
	case ReasonDeadlineUnmeetable:
		return "deadline_unmeetable"
	case ReasonDeadlineExceeded:
		return "deadline_exceeded"
	case ReasonTooLarge:
		return "too_large"
	case ReasonUnknownClass:
		return "unknown_class"
	}
	return "unknown"
}

// MaxRetryWait is the longest expected wait for which a refusal still tells
// SDKs to retry (the limit policies' rule for x-should-retry).
const MaxRetryWait = 60 * time.Second

// Refusal is the typed error of a request that was not admitted. Nothing was
// charged to the fair-share counters for it.
type Refusal struct {
	Reason             Reason
	Target, App, Class string
	// ExpectedWait is the estimated wait, from the refusal, until a request
	// like this one would start; valid when Known.
	ExpectedWait time.Duration
	Known        bool
	// Waited is how long the request waited (ReasonDeadlineExceeded).
	Waited time.Duration
	// Deadline is the wait the request was allowed (0: none).
	Deadline time.Duration
}

func (e *Refusal) Error() string {
	switch e.Reason {
	case ReasonQueueFull:
		return fmt.Sprintf("admission: the queue of application %q in class %q for %s is full%s", e.App, e.Class, e.Target, e.expected())
	case ReasonDeadlineUnmeetable:
		return fmt.Sprintf("admission: %s cannot start within the deadline of %s%s", e.Target, e.Deadline, e.expected())
	case ReasonDeadlineExceeded:
		return fmt.Sprintf("admission: the deadline of %s passed after waiting %s for %s", e.Deadline, e.Waited.Round(time.Millisecond), e.Target)
	case ReasonTooLarge:
		return fmt.Sprintf("admission: the request can never fit the capacity of %s for class %q", e.Target, e.Class)
	case ReasonUnknownClass:
		return fmt.Sprintf("admission: class %q is not configured", e.Class)
	}
	return "admission: refused"
}

func (e *Refusal) expected() string {
	if !e.Known {
		return ""
	}
	return fmt.Sprintf(" (expected start in %s)", e.ExpectedWait.Round(time.Millisecond))
}

// RetryAfter is the wait a Retry-After header should carry, when there is one
// worth giving: the expected wait, for every refusal except ReasonTooLarge
// and ReasonUnknownClass (waiting never cures those).
func (e *Refusal) RetryAfter() (time.Duration, bool) {
	switch e.Reason {
	case ReasonTooLarge, ReasonUnknownClass:
		return 0, false
	}
	return e.ExpectedWait, e.Known
}

// ShouldRetry tells SDKs whether to retry on their own (x-should-retry): only
// a full queue whose expected wait is unknown or at most MaxRetryWait. A
// refused or expired deadline says no: a retry the SDK makes after
// Retry-After would start later than the client asked, and the application
// should decide.
func (e *Refusal) ShouldRetry() bool {
	return e.Reason == ReasonQueueFull && (!e.Known || e.ExpectedWait <= MaxRetryWait)
}
