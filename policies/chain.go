package policies

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync/atomic"

	"sluice/deployment"
	"sluice/gwerror"
	"sluice/sse"
)

// EntrySpec is one chain entry as configured.
type EntrySpec struct {
	Name    string
	Version string
	Params  map[string]any
	// Resources, when not nil, attaches the entry to some resources only.
	Resources *ResourceFilter
}

// EntryError is a problem with one chain entry. Field is "name", "version",
// "params" or "" (the entry as a whole); Params carries params problems.
type EntryError struct {
	Index   int
	Field   string
	Message string
	Params  ParamErrors
}

func (e *EntryError) Error() string {
	if len(e.Params) > 0 {
		return fmt.Sprintf("policies[%d].params: %s", e.Index, e.Params.Error())
	}
	if e.Field != "" {
		return fmt.Sprintf("policies[%d].%s: %s", e.Index, e.Field, e.Message)
	}
	return fmt.Sprintf("policies[%d]: %s", e.Index, e.Message)
}

// Entry is a constructed chain member.
type Entry struct {
	Def    *Definition
	Policy Policy
	Route  RouteInfo
	Params any
	// Resources is the entry's attachment (nil: every resource).
	Resources *ResourceFilter

	resp  ResponseHandler
	strm  StreamHandler
	final Finalizer
}

// Chain is an immutable, ordered list of policy instances for one route.
type Chain struct {
	entries []Entry
	logger  *slog.Logger
	// all lists every entry index; views, nil when no entry has a resource
	// filter, lists per known resource the indexes of the entries attached
	// to it. A run walks one of them.
	all   []int
	views map[string][]int
	// closed is set by Close (lifecycle.go).
	closed atomic.Bool
}

// Entries returns the chain's members in list order (read-only).
func (c *Chain) Entries() []Entry { return c.entries }

// EntriesFor returns, in list order, the members that run for call: those
// attached to its resource (every member when no entry has a filter).
func (c *Chain) EntriesFor(call *Call) []*Entry {
	idx := c.active(call)
	out := make([]*Entry, len(idx))
	for k, i := range idx {
		out[k] = &c.entries[i]
	}
	return out
}

// Identify runs every Identifier among the members that run for call, in
// list order, and returns the first failure with its policy named.
func (c *Chain) Identify(call *Call) *gwerror.Error {
	for _, i := range c.active(call) {
		e := &c.entries[i]
		id, ok := e.Policy.(Identifier)
		if !ok {
			continue
		}
		if gerr := id.Identify(call); gerr != nil {
			if gerr.Policy == "" {
				gerr.Policy = e.Def.Name
			}
			return gerr
		}
	}
	return nil
}

// active returns the indexes of the entries that run for call.
func (c *Chain) active(call *Call) []int {
	if c.views == nil {
		return c.all
	}
	res := CallResource(call)
	if v, ok := c.views[res]; ok {
		return v
	}
	return c.attached(res)
}

func (c *Chain) attached(res string) []int {
	var out []int
	for i := range c.entries {
		if c.entries[i].Resources.Matches(res) {
			out = append(out, i)
		}
	}
	return out
}

// index precomputes all and views once the entries are built.
func (c *Chain) index() {
	c.all = make([]int, len(c.entries))
	filtered := false
	for i := range c.entries {
		c.all[i] = i
		filtered = filtered || c.entries[i].Resources != nil
	}
	if !filtered {
		return
	}
	c.views = make(map[string][]int, len(deployment.ResourceNames))
	for _, r := range deployment.ResourceNames {
		c.views[r] = c.attached(r)
	}
}

// Len is the number of policies in the chain.
func (c *Chain) Len() int { return len(c.entries) }

// InstanceID is the short hash identifying a policy instance: name, version,
// canonical params (JSON with sorted keys), route and position.
func InstanceID(name, version string, params map[string]any, route string, position int) string {
	canon, _ := json.Marshal(params) // encoding/json sorts map keys
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00%d", name, version, canon, route, position)
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// BuildChain validates, decodes and constructs specs for route. provided lists
// the metadata keys the gateway itself writes (GatewayProvided). Errors are
// *EntryError; the instances built before the failing entry are closed
// (Closer) before it returns.
func (r *Registry) BuildChain(route RouteInfo, specs []EntrySpec, svc *Services, provided []MetaKey) (_ *Chain, err error) {
	if svc == nil {
		svc = &Services{}
	}
	logger := svc.Logger
	if logger == nil {
		logger = slog.Default()
	}
	ch := &Chain{entries: make([]Entry, 0, len(specs)), logger: logger}
	defer func() {
		if err == nil {
			return
		}
		if cerr := ch.Close(); cerr != nil {
			logger.Warn("closing the instances of a chain that failed to build", "route", route.RouteName, "error", cerr)
		}
	}()
	for i, s := range specs {
		if s.Name == "" {
			return nil, &EntryError{Index: i, Field: "name", Message: "policy name is required"}
		}
		version := s.Version
		if version == "" {
			version = deployment.DefaultPolicyVersion
		}
		d, ok := r.Lookup(s.Name, version)
		if !ok {
			if _, other := r.anyVersion(s.Name); other {
				return nil, &EntryError{Index: i, Field: "version", Message: fmt.Sprintf("policy %q has no version %q", s.Name, version)}
			}
			return nil, &EntryError{Index: i, Field: "name", Message: fmt.Sprintf("unknown policy %q (known: %v)", s.Name, r.Names())}
		}
		params, err := r.DecodeParams(d, s.Params)
		if err != nil {
			var pe ParamErrors
			if asParamErrors(err, &pe) {
				return nil, &EntryError{Index: i, Field: "params", Params: pe}
			}
			return nil, &EntryError{Index: i, Field: "params", Message: err.Error()}
		}
		ri := route
		ri.Position = i
		ri.InstanceID = InstanceID(d.Name, d.Version, s.Params, route.RouteName, i)
		p, err := d.Build(params, ri, svc)
		if err != nil {
			var pe ParamErrors
			if asParamErrors(err, &pe) {
				return nil, &EntryError{Index: i, Field: "params", Params: pe}
			}
			return nil, &EntryError{Index: i, Message: fmt.Sprintf("%s: %v", d.ID(), err)}
		}
		e := Entry{Def: d, Policy: p, Route: ri, Params: params, Resources: s.Resources}
		e.resp, _ = p.(ResponseHandler)
		e.strm, _ = p.(StreamHandler)
		e.final, _ = p.(Finalizer)
		ch.entries = append(ch.entries, e)
	}
	if err := checkMetadata(ch.entries, provided); err != nil {
		return nil, err
	}
	for i := range ch.entries {
		l, ok := ch.entries[i].Policy.(ChainLinker)
		if !ok {
			continue
		}
		if err := l.LinkChain(ch.entries, i); err != nil {
			return nil, &EntryError{Index: i, Message: fmt.Sprintf("%s: %v", ch.entries[i].Def.ID(), err)}
		}
	}
	ch.index()
	return ch, nil
}

// ChainLinker is implemented by a policy that works with another member of
// its chain (llm-cost-based-ratelimit estimates with the pricer of the
// llm-cost after it). BuildChain calls LinkChain on every such member, in
// list order, once every entry is built and the metadata check has passed,
// before the chain serves a request; entries is the chain (read-only) and
// self the member's own index. An error fails the chain at that entry.
type ChainLinker interface {
	LinkChain(entries []Entry, self int) error
}

func (r *Registry) anyVersion(name string) (*Definition, bool) {
	for _, d := range r.defs {
		if d.Name == name {
			return d, true
		}
	}
	return nil, false
}

// execSeq orders (phase, position) in execution order: request phase in list
// order, then response and final phases in reverse list order.
func execSeq(p Phase, pos, n int) int {
	switch p {
	case PhaseRequest:
		return pos
	case PhaseResponse:
		return n + (n - 1 - pos)
	default:
		return 2*n + (n - 1 - pos)
	}
}

// checkMetadata verifies that every required read is preceded, in execution
// order, by a write of the same key (by a policy or the gateway).
func checkMetadata(entries []Entry, provided []MetaKey) error {
	n := len(entries)
	for i, e := range entries {
		for _, rd := range e.Def.Reads {
			if rd.Optional {
				continue
			}
			need := execSeq(rd.Phase, i, n)
			ok := false
			for _, g := range provided {
				if g.Key == rd.Key && execSeq(g.Phase, 0, 1) <= execSeq(rd.Phase, 0, 1) {
					ok = true
				}
			}
			var laterWriter *Entry
			for j := range entries {
				for _, w := range entries[j].Def.Writes {
					if w.Key != rd.Key {
						continue
					}
					// A writer attached to fewer resources than the reader
					// leaves the reader without the key on the others.
					if execSeq(w.Phase, j, n) < need && entries[j].Resources.covers(e.Resources) {
						ok = true
					} else if j != i && laterWriter == nil {
						laterWriter = &entries[j]
					}
				}
			}
			if ok {
				continue
			}
			msg := fmt.Sprintf("%s reads metadata %q in the %s phase but no policy writes it before then", e.Def.Name, rd.Key, rd.Phase)
			switch {
			case laterWriter != nil && rd.Phase == PhaseRequest:
				msg += fmt.Sprintf("; list %s before %s", laterWriter.Def.Name, e.Def.Name)
			case laterWriter != nil:
				msg += fmt.Sprintf("; list %s after %s (response and final phases run in reverse order)", laterWriter.Def.Name, e.Def.Name)
			default:
				msg += "; add a policy that writes it"
			}
			return &EntryError{Index: i, Message: msg}
		}
	}
	return nil
}

// Run is one request's pass through a chain. The gateway calls Request, then
// (if admitted and upstream answered) Response and StreamEvent, and always
// Finish; Finish is idempotent and the first call wins, so the gateway may also
// defer Abort to cover panics and early returns.
type Run struct {
	chain *Chain
	call  *Call
	// active are the indexes of the entries that run for this request (the
	// ones attached to its resource), in list order.
	active []int
	// ran is the number of active policies whose request phase was invoked:
	// active[:ran] get the later phases.
	ran        int
	rejectedBy int
	upstream   bool
	failed     bool
	finished   atomic.Bool
	// outcome is what Finish delivered (valid once finished is set, read on
	// the request's goroutine).
	outcome Outcome
}

// Start begins a run of c for call.
func (c *Chain) Start(call *Call) *Run {
	return &Run{chain: c, call: call, rejectedBy: -1, active: c.active(call)}
}

// Call returns the run's call.
func (r *Run) Call() *Call { return r.call }

func (r *Run) recovered(where string, e *Entry, v any) *gwerror.Error {
	r.failed = true
	r.chain.logger.Error("policy panicked", "policy", e.Def.ID(), "instance", e.Route.InstanceID,
		"phase", where, "route", e.Route.RouteName, "request_id", r.call.Shared.RequestID,
		"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	return gwerror.Internal(r.call.Shared.RequestID)
}

// Request runs the request phase in list order. On rejection (or a panic) the
// run is finished at once: every policy whose request phase ran gets its final
// call with Rejected (or Failed), and the error is returned for rendering.
func (r *Run) Request() (gerr *gwerror.Error) {
	for k, i := range r.active {
		e := &r.chain.entries[i]
		r.ran = k + 1
		gerr = r.requestOne(e)
		if gerr != nil {
			if r.failed {
				r.Finish(Outcome{Kind: Failed, Status: gerr.Status, RejectedBy: -1})
				return gerr
			}
			if gerr.Policy == "" {
				gerr.Policy = e.Def.Name
			}
			r.rejectedBy = i
			r.Finish(Outcome{Kind: Rejected, Status: gerr.Status, RejectedBy: i})
			return gerr
		}
	}
	return nil
}

func (r *Run) requestOne(e *Entry) (gerr *gwerror.Error) {
	defer func() {
		if v := recover(); v != nil {
			gerr = r.recovered("request", e, v)
		}
	}()
	return e.Policy.OnRequest(r.call)
}

// MarkUpstream records that an upstream attempt was made.
func (r *Run) MarkUpstream() { r.upstream = true }

// WentUpstream reports whether MarkUpstream was called.
func (r *Run) WentUpstream() bool { return r.upstream }

// Failed reports whether a policy panicked during this run.
func (r *Run) Failed() bool { return r.failed }

// Response runs the response phase in reverse list order. The first error
// (a policy's or a recovered panic) stops the phase and is returned.
func (r *Run) Response(resp *Response) *gwerror.Error {
	for k := r.ran - 1; k >= 0; k-- {
		e := &r.chain.entries[r.active[k]]
		if e.resp == nil {
			continue
		}
		if gerr := r.responseOne(e, resp); gerr != nil {
			if gerr.Policy == "" && !r.failed {
				gerr.Policy = e.Def.Name
			}
			return gerr
		}
	}
	return nil
}

func (r *Run) responseOne(e *Entry, resp *Response) (gerr *gwerror.Error) {
	defer func() {
		if v := recover(); v != nil {
			gerr = r.recovered("response", e, v)
		}
	}()
	return e.resp.OnResponse(r.call, resp)
}

// StreamEvent runs the stream phase for one event in reverse list order. A
// non-nil result means a policy panicked and the stream must be aborted.
func (r *Run) StreamEvent(ev *sse.Event) *gwerror.Error {
	for k := r.ran - 1; k >= 0; k-- {
		e := &r.chain.entries[r.active[k]]
		if e.strm == nil {
			continue
		}
		if gerr := r.streamOne(e, ev); gerr != nil {
			return gerr
		}
	}
	return nil
}

func (r *Run) streamOne(e *Entry, ev *sse.Event) (gerr *gwerror.Error) {
	defer func() {
		if v := recover(); v != nil {
			gerr = r.recovered("stream", e, v)
		}
	}()
	e.strm.OnStreamEvent(r.call, ev)
	return nil
}

// Finish delivers o, once, to every policy whose request phase ran, in reverse
// list order. Later calls are no-ops and return false. A policy that panicked
// earlier in the run turns any outcome into Failed; WentUpstream and RejectedBy
// are filled from the run's own record.
func (r *Run) Finish(o Outcome) bool {
	if !r.finished.CompareAndSwap(false, true) {
		return false
	}
	if r.failed && o.Kind != Failed {
		o.Kind = Failed
	}
	o.WentUpstream = o.WentUpstream || r.upstream
	if o.Kind != Rejected {
		o.RejectedBy = -1
	} else {
		o.RejectedBy = r.rejectedBy
	}
	r.outcome = o
	// Each policy gets its own copy of o, all copies in one allocation.
	n := 0
	for k := r.ran - 1; k >= 0; k-- {
		if r.chain.entries[r.active[k]].final != nil {
			n++
		}
	}
	if n == 0 {
		return true
	}
	copies := make([]Outcome, n)
	for k := r.ran - 1; k >= 0; k-- {
		e := &r.chain.entries[r.active[k]]
		if e.final == nil {
			continue
		}
		n--
		copies[n] = o
		r.finalOne(e, &copies[n])
	}
	return true
}

func (r *Run) finalOne(e *Entry, o *Outcome) {
	defer func() {
		if v := recover(); v != nil {
			r.chain.logger.Error("policy panicked", "policy", e.Def.ID(), "instance", e.Route.InstanceID,
				"phase", "final", "route", e.Route.RouteName, "request_id", r.call.Shared.RequestID,
				"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
		}
	}()
	e.final.OnFinal(r.call, o)
}

// Finished reports whether Finish has run.
func (r *Run) Finished() bool { return r.finished.Load() }

// Outcome is the outcome Finish delivered to the policies (Kind, Status,
// WentUpstream and RejectedBy as the runner settled them); ok is false
// before Finish. The usage record is built from it (gateway), so the meter
// and the policies see the same final outcome. Call it on the goroutine that
// called Finish, or after it returned.
func (r *Run) Outcome() (o Outcome, ok bool) {
	if !r.finished.Load() {
		return Outcome{}, false
	}
	return r.outcome, true
}

// Abort finishes the run if nothing else did: Cancelled when the request's
// context is done, else Failed. Meant to be deferred by the gateway so that
// every path, including a panic in the gateway itself, ends the run.
func (r *Run) Abort() {
	if r.finished.Load() {
		return
	}
	kind := Failed
	if r.call.Ctx != nil && r.call.Ctx.Err() != nil {
		kind = Cancelled
	}
	r.Finish(Outcome{Kind: kind})
}
