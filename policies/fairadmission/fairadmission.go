// Package fairadmission is the `fair-admission` policy: when the route's
// provider is at its capacity (providers[].capacity), requests wait in
// per-application queues and start in weighted fair order of token work
// (docs/fairness.md). The scheduler is the process-lifetime service
// Services.Admission; this policy turns a request into a ticket, waits for
// its start, reports output as the stream is forwarded and settles the hold
// with the request's usage once the upstream request has ended.
package fairadmission

import (
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"strconv"
	"sync"
	"time"

	"sluice/admission"
	"sluice/gwerror"
	"sluice/policies"
	"sluice/policies/ratelimit"
	"sluice/sharedctx"
	"sluice/sse"
)

// Name is the policy name.
const Name = "fair-admission"

// HeaderQueueMs is the response header that carries, in whole milliseconds,
// how long a request waited for capacity; only answers that waited carry it.
const HeaderQueueMs = "X-Sluice-Queue-Ms"

// Defaults of Params.
const (
	DefaultMaxOutputTokens = 4096
	DefaultDeadlineHeader  = "x-sluice-deadline-ms"
	DefaultProgressEvery   = 16
)

// Params configures fair-admission.
type Params struct {
	// MaxOutputTokens is the output bound per choice of a request that sets
	// none, and the cap of one that sets more. It is written
	// into the upstream request, and the gateway cuts an answer that passes
	// it: the capacity a request holds is its prompt estimate plus this
	// bound, so the bound must hold.
	MaxOutputTokens int64 `json:"maxOutputTokens,omitempty" jsonschema:"minimum=1,maximum=10000000,default=4096"`
	// DeadlineHeader names the request header in which a client asks how
	// long its request may wait for its start, in milliseconds, within its
	// class's maxDeadline (admission.classes). A value that is not a
	// positive whole number (at most a day) is a 400.
	DeadlineHeader string `json:"deadlineHeader,omitempty" jsonschema:"minLength=1,pattern=^[!#$%&'*+.^_|~0-9A-Za-z-]+$,default=x-sluice-deadline-ms"`
	// ProgressEvery is how many output tokens of a stream pass between two
	// charges of its output to the application's fair-share counter; the
	// request is settled with its real usage when it ends either way.
	ProgressEvery int64 `json:"progressEvery,omitempty" jsonschema:"minimum=1,maximum=1000000,default=16"`
}

// Definition is the policy's catalog entry.
func Definition() policies.Definition {
	d := policies.Define(Name, "v1",
		"Fair admission at the provider's capacity: requests wait in per-application queues and start in weighted fair order of token work, with service classes, deadlines and bounded queues. List it after every limit policy.",
		build)
	d.Reads = []policies.MetaKey{{Key: sharedctx.KeyApplicationID, Phase: policies.PhaseRequest, Optional: true}}
	return d
}

// Policy is one fair-admission instance.
type Policy struct {
	sched  *admission.Scheduler
	svc    *policies.Services
	target string
	maxOut int64
	header string
	// headerKey is header in canonical form, the key of http.Header.
	headerKey string
	every     int64
	slot      string // the instance's metadata key of a request's hold
	holds     sync.Pool
}

var (
	_ policies.StreamHandler = (*Policy)(nil)
	_ policies.Finalizer     = (*Policy)(nil)
	_ policies.ChainLinker   = (*Policy)(nil)
)

// hold is one admitted request's grant and how much output was reported.
// Holds are pooled: one request's lifetime, from its start to its final.
type hold struct {
	grant admission.Grant
	next  int64 // report when the stream output reaches this
}

func build(p *Params, route policies.RouteInfo, svc *policies.Services) (policies.Policy, error) {
	if svc.Admission == nil {
		return nil, errors.New("no admission scheduler in the gateway's services")
	}
	pol := &Policy{sched: svc.Admission, svc: svc, target: route.Provider,
		maxOut: p.MaxOutputTokens, header: p.DeadlineHeader, every: p.ProgressEvery,
		slot: sharedctx.InstanceKey(route.InstanceID, "fair-admission.hold")}
	if pol.maxOut == 0 {
		pol.maxOut = DefaultMaxOutputTokens
	}
	if pol.header == "" {
		pol.header = DefaultDeadlineHeader
	}
	pol.headerKey = textproto.CanonicalMIMEHeaderKey(pol.header)
	if pol.every == 0 {
		pol.every = DefaultProgressEvery
	}
	pol.holds.New = func() any { return new(hold) }
	return pol, nil
}

// LinkChain refuses a chain in which a limit policy (one that reports
// quotas) comes after this one, or that admits twice: a request over a
// budget must be refused before it waits, and the reservations of a request
// that waits are held while it waits (and released if it leaves).
func (p *Policy) LinkChain(entries []policies.Entry, self int) error {
	for j := self + 1; j < len(entries); j++ {
		e := &entries[j]
		if e.Def.Name == Name {
			return fmt.Errorf("the chain admits twice: remove policies[%d] (one %s per route)", j, Name)
		}
		if _, limit := e.Policy.(policies.QuotaReporter); limit {
			return fmt.Errorf("%s must come after every limit policy: list %s (policies[%d]) before %s, so that a request over a limit is refused before it waits for capacity",
				Name, e.Def.Name, j, Name)
		}
	}
	return nil
}

// OnRequest waits for the request's start on the provider's capacity.
func (p *Policy) OnRequest(c *policies.Call) *gwerror.Error {
	deadline, gerr := p.deadline(c)
	if gerr != nil {
		return gerr
	}
	app := c.Shared.ApplicationID()
	if app == "" {
		app = sharedctx.DefaultApplicationID
	}
	bound, choices, outputs := ratelimit.OutputBound(c, p.maxOut)
	if outputs {
		if err := ratelimit.ApplyOutputBound(c, bound); err != nil {
			return gwerror.Internal(c.Shared.RequestID)
		}
	}
	tk := admission.Ticket{Target: p.target, App: app, InputTokens: policies.PromptTokens(c, p.svc.Tokens),
		OutputBound: bound * choices, Deadline: deadline}
	g, err := p.sched.Admit(c.Ctx, tk)
	if err != nil {
		return p.refused(c, tk, err)
	}
	if w := g.Waited(); w > 0 {
		c.ClientHeader.Set(HeaderQueueMs, strconv.FormatInt(w.Milliseconds(), 10))
	}
	if !g.Tracked() {
		return nil // the provider has no capacity: nothing is held
	}
	h := p.holds.Get().(*hold)
	h.grant, h.next = g, p.every
	c.Shared.Metadata[p.slot] = h
	return nil
}

// deadline reads the client's deadline header (0 when absent).
func (p *Policy) deadline(c *policies.Call) (time.Duration, *gwerror.Error) {
	if c.Request == nil {
		return 0, nil
	}
	vs := c.Request.Header[p.headerKey] // canonical already: Get would canonicalize (allocate) per request
	if len(vs) == 0 || vs[0] == "" {
		return 0, nil
	}
	if len(vs) > 1 {
		e := gwerror.BadRequest(gwerror.CodeInvalidRequest,
			"header %s is given %d times: send it once (a positive whole number of milliseconds)", p.header, len(vs))
		e.Param = p.header
		return 0, e
	}
	v := vs[0]
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 || ms > int64(24*time.Hour/time.Millisecond) {
		e := gwerror.BadRequest(gwerror.CodeInvalidRequest,
			"header %s must be a positive whole number of milliseconds (at most a day): how long the request may wait for its start; got %q", p.header, v)
		e.Param = p.header
		return 0, e
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// refused turns Admit's error into the client's answer.
func (p *Policy) refused(c *policies.Call, tk admission.Ticket, err error) *gwerror.Error {
	var r *admission.Refusal
	if !errors.As(err, &r) {
		// The context ended while the request waited: the client is gone
		// (or the server shuts down). Nothing was charged; nobody reads
		// this answer, the status is what metrics record.
		return gwerror.New(gwerror.StatusClientClosed, gwerror.TypeInvalidRequest, gwerror.CodeClientClosed,
			"the client went away while the request waited for capacity")
	}
	if r.Waited > 0 {
		c.ClientHeader.Set(HeaderQueueMs, strconv.FormatInt(r.Waited.Milliseconds(), 10))
	}
	if r.Reason == admission.ReasonUnknownClass {
		if p.svc.Logger != nil {
			p.svc.Logger.Error("fair-admission: the application's class is not configured", "class", r.Class, "app", r.App,
				"provider", r.Target, "request_id", c.Shared.RequestID)
		}
		return gwerror.Internal(c.Shared.RequestID)
	}
	e := gwerror.New(http.StatusTooManyRequests, gwerror.TypeRateLimit, gwerror.CodeRateLimitExceeded, refusalMessage(r, tk))
	if wait, ok := r.RetryAfter(); ok {
		e.RetryAfter = wait
	}
	e.ShouldRetry = gwerror.RetryNo
	if r.ShouldRetry() {
		e.ShouldRetry = gwerror.RetryYes
	}
	return e
}

func refusalMessage(r *admission.Refusal, tk admission.Ticket) string {
	expected := ""
	if r.Known {
		expected = fmt.Sprintf("; a request like this one would start in about %s", r.ExpectedWait.Round(time.Millisecond))
	}
	switch r.Reason {
	case admission.ReasonQueueFull:
		return fmt.Sprintf("provider %s is at capacity and application %s has all the work it may queue in class %s waiting%s",
			r.Target, r.App, r.Class, expected)
	case admission.ReasonDeadlineUnmeetable:
		return fmt.Sprintf("provider %s is at capacity and cannot start the request within its deadline of %s (class %s)%s",
			r.Target, r.Deadline, r.Class, expected)
	case admission.ReasonDeadlineExceeded:
		return fmt.Sprintf("the request waited %s for provider %s and its deadline of %s passed (class %s)%s",
			r.Waited.Round(time.Millisecond), r.Target, r.Deadline, r.Class, expected)
	case admission.ReasonTooLarge:
		return fmt.Sprintf("the request (%d prompt tokens and an output bound of %d) can never fit the capacity of provider %s in class %s: lower max_tokens or the prompt",
			tk.InputTokens, tk.OutputBound, r.Target, r.Class)
	}
	return r.Error()
}

// OnStreamEvent reports the stream's output to the scheduler every
// ProgressEvery tokens.
func (p *Policy) OnStreamEvent(c *policies.Call, _ *sse.Event) {
	h, _ := c.Shared.Metadata[p.slot].(*hold)
	if h == nil {
		return
	}
	if out := c.StreamOutput(); out >= h.next {
		h.grant.Progress(out)
		h.next = out + p.every
	}
}

// OnFinal ends the hold; the gateway delivers the outcome only once the
// upstream request has ended (its body closed), so the capacity frees when
// the provider's does. The counter settles with the request's usage
// (Shared.Usage; a figure it lacks keeps the estimate, or the output
// reported so far); a
// request that never went upstream is refunded entirely.
func (p *Policy) OnFinal(c *policies.Call, o *policies.Outcome) {
	h, _ := c.Shared.Metadata[p.slot].(*hold)
	if h == nil {
		return
	}
	delete(c.Shared.Metadata, p.slot)
	switch u := c.Shared.Usage(); {
	case o.Kind == policies.Rejected || !o.WentUpstream:
		h.grant.Done(0, 0)
	case u != nil:
		h.grant.Done(u.PromptTokens, u.CompletionTokens)
	default:
		h.grant.Done(-1, -1)
	}
	*h = hold{}
	p.holds.Put(h)
}
