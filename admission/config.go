package admission

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// DefaultClass is the class of a ticket that names none. A configuration
// that does not define it gets it with the zero Class (no reserved share, no
// ceiling, no deadline, unbounded queues).
const DefaultClass = "standard"

// Default service weights (Sheng et al., OSDI 2024: output tokens cost twice
// what input tokens do).
const (
	DefaultInputWeight  = 1.0
	DefaultOutputWeight = 2.0
)

// Config is what the scheduler enforces. Configure replaces it whole; the
// scheduler's state (queues, running requests, counters) is kept.
type Config struct {
	// InputWeight and OutputWeight price a request's service in work units:
	// work = InputWeight*input tokens + OutputWeight*output tokens. Zero
	// means the default (1 and 2).
	InputWeight, OutputWeight float64
	// Targets are the upstreams with a bounded capacity, by name. A ticket
	// for a target not listed is admitted at once and not tracked.
	Targets map[string]Capacity
	// Classes are the service classes, by name (see DefaultClass).
	Classes map[string]Class
	// Weights are the applications' fair-share weights, by application id;
	// an application not listed has weight 1. A weight w gets w times the
	// work of a weight-1 application while both are backlogged.
	Weights map[string]float64
	// AppClasses are the classes granted to applications, by application
	// id: a ticket that names no class gets its application's (an
	// application not listed: DefaultClass). Each must be a class of
	// Classes, or DefaultClass.
	AppClasses map[string]string
}

// Capacity bounds what a target runs at once. A zero field is no bound in
// that dimension; at least one must be set.
type Capacity struct {
	// MaxConcurrent is the number of admitted requests in flight.
	MaxConcurrent int
	// MaxTokensInFlight bounds the sum, over admitted requests in flight, of
	// reserved prompt tokens plus output bound: the gateway's stand-in for
	// the upstream's KV-cache residency.
	MaxTokensInFlight int64
}

// Class is a service class: applications are granted one by configuration,
// never by a request.
type Class struct {
	// ReservedShare is the fraction of the target's capacity (in both
	// dimensions) the class is owed while it has work: queued work of a class
	// below its share is dispatched before any other class's. It is a floor,
	// not a partition: while the class has no work its share is lent to the
	// others, and it gets it back as running requests end (nothing running is
	// preempted). The shares of all classes sum to at most 1.
	ReservedShare float64
	// MaxShare caps the fraction of the target's capacity the class's running
	// requests may hold (0 means 1: no cap). At least ReservedShare.
	MaxShare float64
	// DefaultDeadline is how long a request of the class may wait for its
	// start when the client asks for no deadline (0: no deadline).
	DefaultDeadline time.Duration
	// MaxDeadline caps the deadline a client may ask for (0: no cap).
	MaxDeadline time.Duration
	// MaxQueuedWork bounds the work (in work units, with the output bound
	// standing for the output) one application may have waiting in this
	// class on one target; a request that would pass it is refused
	// (ReasonQueueFull). One request may always wait, whatever its size.
	// 0: no bound.
	MaxQueuedWork float64
	// BurstHeadroom is the fraction (0 to below 1) of each capacity bound
	// that a flow of the class holding at least its fair share leaves free
	// when it starts a request; flows holding less (an application whose
	// requests have just arrived, or that sends little) may use it. It
	// trades capacity (the headroom is idle while nobody below their share
	// needs it) for the start latency of those flows when backlogged flows
	// fill the target. A flow's fair share is its weight over the weights of
	// the flows with requests running or queued on the target, in any
	// class; what it holds is its dominant share of requests and tokens in
	// flight. Each bound's headroom is rounded down to whole requests and
	// tokens. 0: none (work conserving).
	BurstHeadroom float64
}

// FieldError is a configuration problem at a field path such as
// "classes.priority.reservedShare".
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// ConfigError lists every problem of a configuration.
type ConfigError []*FieldError

func (e ConfigError) Error() string {
	s := make([]string, len(e))
	for i, f := range e {
		s[i] = f.Error()
	}
	return strings.Join(s, "; ")
}

// Validate checks c and returns a ConfigError naming each bad field (in
// sorted order), or nil.
func (c *Config) Validate() error {
	var errs ConfigError
	add := func(field, format string, a ...any) {
		errs = append(errs, &FieldError{Field: field, Message: fmt.Sprintf(format, a...)})
	}
	finitePos := func(v float64) bool { return v > 0 && !math.IsInf(v, 0) && !math.IsNaN(v) }
	if c.InputWeight != 0 && !finitePos(c.InputWeight) {
		add("inputWeight", "must be a positive number")
	}
	if c.OutputWeight != 0 && !finitePos(c.OutputWeight) {
		add("outputWeight", "must be a positive number")
	}
	for _, name := range sortedKeys(c.Targets) {
		capy, f := c.Targets[name], "targets."+name
		switch {
		case capy.MaxConcurrent < 0:
			add(f+".maxConcurrent", "must not be negative")
		case capy.MaxTokensInFlight < 0:
			add(f+".maxTokensInFlight", "must not be negative")
		case capy.MaxConcurrent == 0 && capy.MaxTokensInFlight == 0:
			add(f, "give maxConcurrent, maxTokensInFlight or both")
		}
	}
	total := 0.0
	for _, name := range sortedKeys(c.Classes) {
		cl, f := c.Classes[name], "classes."+name
		if name == "" {
			add("classes", "a class needs a name")
		}
		okShare := !math.IsNaN(cl.ReservedShare) && cl.ReservedShare >= 0 && cl.ReservedShare <= 1
		if !okShare {
			add(f+".reservedShare", "must be between 0 and 1")
		} else {
			total += cl.ReservedShare
		}
		switch {
		case math.IsNaN(cl.MaxShare) || cl.MaxShare < 0 || cl.MaxShare > 1:
			add(f+".maxShare", "must be between 0 and 1 (0: no cap)")
		case cl.MaxShare > 0 && okShare && cl.MaxShare < cl.ReservedShare:
			add(f+".maxShare", "must be at least reservedShare (%g)", cl.ReservedShare)
		}
		if cl.DefaultDeadline < 0 {
			add(f+".defaultDeadline", "must not be negative")
		}
		if cl.MaxDeadline < 0 {
			add(f+".maxDeadline", "must not be negative")
		}
		if cl.MaxDeadline > 0 && cl.DefaultDeadline > cl.MaxDeadline {
			add(f+".defaultDeadline", "must not exceed maxDeadline (%s)", cl.MaxDeadline)
		}
		if math.IsNaN(cl.MaxQueuedWork) || cl.MaxQueuedWork < 0 || math.IsInf(cl.MaxQueuedWork, 0) {
			add(f+".maxQueuedWork", "must be a non-negative number (0: no bound)")
		}
		if math.IsNaN(cl.BurstHeadroom) || cl.BurstHeadroom < 0 || cl.BurstHeadroom >= 1 {
			add(f+".burstHeadroom", "must be at least 0 and below 1 (0: none)")
		}
	}
	if total > 1+1e-9 {
		add("classes", "the reserved shares sum to %.6g; at most 1", total)
	}
	for _, app := range sortedKeys(c.Weights) {
		if !finitePos(c.Weights[app]) {
			add("weights."+app, "must be a positive number")
		}
	}
	for _, app := range sortedKeys(c.AppClasses) {
		if cl := c.AppClasses[app]; cl != DefaultClass {
			if _, ok := c.Classes[cl]; !ok {
				add("appClasses."+app, "class %q is not configured (classes: %s)", cl, strings.Join(c.classNames(), ", "))
			}
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}

// classNames lists the configured classes and DefaultClass, sorted.
func (c *Config) classNames() []string {
	names := sortedKeys(c.Classes)
	if _, ok := c.Classes[DefaultClass]; !ok {
		names = append(names, DefaultClass)
		sort.Strings(names)
	}
	return names
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// settings is a validated Config with defaults applied, shared read-only by
// every target.
type settings struct {
	wIn, wOut float64
	targets   map[string]Capacity
	classes   map[string]Class
	weights   map[string]float64
	appClass  map[string]string
}

func compile(c Config) (*settings, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	s := &settings{wIn: c.InputWeight, wOut: c.OutputWeight,
		targets:  make(map[string]Capacity, len(c.Targets)),
		classes:  make(map[string]Class, len(c.Classes)+1),
		weights:  make(map[string]float64, len(c.Weights)),
		appClass: make(map[string]string, len(c.AppClasses))}
	if s.wIn == 0 {
		s.wIn = DefaultInputWeight
	}
	if s.wOut == 0 {
		s.wOut = DefaultOutputWeight
	}
	for k, v := range c.Targets {
		s.targets[k] = v
	}
	for k, v := range c.Classes {
		if v.MaxShare == 0 {
			v.MaxShare = 1
		}
		s.classes[k] = v
	}
	if _, ok := s.classes[DefaultClass]; !ok {
		s.classes[DefaultClass] = Class{MaxShare: 1}
	}
	for k, v := range c.Weights {
		s.weights[k] = v
	}
	for k, v := range c.AppClasses {
		s.appClass[k] = v
	}
	return s, nil
}

// class is the class of a ticket of app that names class ("": app's granted
// class, or DefaultClass).
func (s *settings) class(app, class string) string {
	if class != "" {
		return class
	}
	if c, ok := s.appClass[app]; ok {
		return c
	}
	return DefaultClass
}

func (s *settings) weight(app string) float64 {
	if w, ok := s.weights[app]; ok {
		return w
	}
	return 1
}

// deadline is the wait a ticket of class cl is allowed: the client's ask
// (asked > 0) or the class default, capped by the class maximum; 0 is none.
func (cl *Class) deadline(asked time.Duration) time.Duration {
	d := cl.DefaultDeadline
	if asked > 0 {
		d = asked
	}
	if cl.MaxDeadline > 0 && (d == 0 || d > cl.MaxDeadline) {
		d = cl.MaxDeadline
	}
	return d
}
