// Package deployment is the deployment document a gateway serves (DESIGN
// section 7): providers, applications, routes and their policy chains; its
// defaults, its structural validation with field-path errors
// ("routes[0].policies[2].params.x"), and API key hashing. The platform
// produces the document and the gateway applies it; they meet here.
//
// It is a leaf: it imports nothing of the gateway, the platform or the
// policies. Policy params are plain values here; the policies package decodes
// and checks them (policies.Check). deployment/yamlfile reads and writes the
// document as YAML with file:line:col positions.
package deployment

import "time"

// Deployment is the whole document. Field tags are the YAML names.
type Deployment struct {
	APIVersion   string        `yaml:"apiVersion"`
	Server       Server        `yaml:"server"`
	Counters     Counters      `yaml:"counters"`
	Meter        Meter         `yaml:"meter"`
	Providers    []Provider    `yaml:"providers"`
	Applications []Application `yaml:"applications"`
	Routes       []Route       `yaml:"routes"`
	// Admission configures fair admission in front of the providers that
	// have a capacity (docs/fairness.md); nil: the defaults (weights 1 and 2,
	// the one class standard without share, deadline or queue bound).
	Admission *Admission `yaml:"admission"`

	// Source is the file the document came from ("" when built in memory).
	Source string `yaml:"-"`

	// Positions locates field paths in Source for error messages; nil for a
	// document built in memory. The decoder (yamlfile) fills it.
	Positions Positions `yaml:"-"`
}

// Server holds data-plane limits. Zero values take the documented defaults.
type Server struct {
	// MaxRequestBytes bounds a request body (default 10 MiB).
	MaxRequestBytes int64 `yaml:"maxRequestBytes"`
	// ShutdownGrace bounds how long shutdown waits for in-flight streams (default 30s).
	ShutdownGrace Duration `yaml:"shutdownGrace"`
	// ReadHeaderTimeout bounds reading a request's headers (default 10s).
	// It is read when the gateway starts serving; a reload does not change it.
	ReadHeaderTimeout Duration `yaml:"readHeaderTimeout"`
	// ReadTimeout bounds reading a request's body (default 30s).
	ReadTimeout Duration `yaml:"readTimeout"`
	// WriteTimeout bounds each write to a client: a client that does not take
	// a stream event or a piece of a body in that time is cut (default 30s).
	WriteTimeout Duration `yaml:"writeTimeout"`
	// MetricsToken, when set, is the bearer token GET /metrics requires
	// (Authorization: Bearer <token>), wherever /metrics is served.
	MetricsToken string `yaml:"metricsToken"`
}

// Counters selects and configures the counter store.
type Counters struct {
	// Backend is "memory" (default) or "redis".
	Backend string `yaml:"backend"`
	Redis   Redis  `yaml:"redis"`
}

// Redis configures the redis counter store.
type Redis struct {
	URL   string   `yaml:"url"`
	Addrs []string `yaml:"addrs"`
	// Cluster forces Redis Cluster with a single seed; several addrs select
	// it anyway.
	Cluster      bool     `yaml:"cluster"`
	Username     string   `yaml:"username"`
	Password     string   `yaml:"password"`
	TLS          bool     `yaml:"tls"`
	KeyPrefix    string   `yaml:"keyPrefix"`
	FailureMode  string   `yaml:"failureMode"`
	DialTimeout  Duration `yaml:"dialTimeout"`
	ReadTimeout  Duration `yaml:"readTimeout"`
	WriteTimeout Duration `yaml:"writeTimeout"`
	PoolSize     int      `yaml:"poolSize"`
	Leases       Leases   `yaml:"leases"`
	// CapacityLeases times the leases through which the replicas share
	// each provider's capacity (fair admission, docs/fairness.md).
	CapacityLeases CapacityLeases `yaml:"capacityLeases"`
}

// CapacityLeases times fair admission's capacity leases. Zero values take
// the scheduler's defaults (3s, 1s, 100ms); renew is at most half the TTL
// and queuedRenew at most renew.
type CapacityLeases struct {
	// TTL is a lease's life without renewal: the capacity of a replica
	// that died comes back to the others within it.
	TTL Duration `yaml:"ttl"`
	// Renew is the renewal period.
	Renew Duration `yaml:"renew"`
	// QueuedRenew is the period while capacity should change hands (this
	// replica has requests queued beyond its lease, or holds more than its
	// share).
	QueuedRenew Duration `yaml:"queuedRenew"`
}

// Leases configures the budget leases of the redis counter store: a gateway
// takes a slice of a busy counter's remaining capacity and serves
// reservations from it in memory (docs/redis.md, "Leases").
type Leases struct {
	// Mode is "auto" (default: leases for the counters they can help) or
	// "off" (every reservation goes to Redis).
	Mode string `yaml:"mode"`
	// TTL is how long a gateway serves from one lease (default 2s): the
	// capacity leased to a gateway that dies returns within TTL + 1s.
	TTL Duration `yaml:"ttl"`
	// Exclude lists counters never leased: a route's, a policy's, or a
	// policy's on a route.
	Exclude []LeaseExclusion `yaml:"exclude"`
}

// LeaseExclusion names counters that are never leased: those of the policy
// on the route; with only one of them set, of every policy on the route or
// of the policy on every route.
type LeaseExclusion struct {
	Route  string `yaml:"route"`
	Policy string `yaml:"policy"`
}

// Provider is an upstream LLM API.
type Provider struct {
	Name string `yaml:"name"`
	// Type is "openai" (any OpenAI-compatible API) or "anthropic".
	Type string `yaml:"type"`
	// URL is the single target; Targets lists several for retries and failover.
	URL     string   `yaml:"url"`
	Targets []string `yaml:"targets"`
	Auth    *Auth    `yaml:"auth"`
	// Timeout bounds one upstream attempt until response headers (default 60s).
	Timeout Duration `yaml:"timeout"`
	// Retries is the number of extra attempts across targets (default 2).
	Retries *int `yaml:"retries"`
	// ForwardHeaders adds client request headers to the ones the gateway
	// forwards upstream: exact names or prefixes ending in "*", compared
	// without regard to case.
	ForwardHeaders []string `yaml:"forwardHeaders"`
	// ApplicationHeader, when set, is a request header the gateway sets on
	// every upstream request to the caller's application id (empty for an
	// unauthenticated request), replacing any value the client sent for it,
	// even one forwardHeaders would forward: the provider can then count
	// usage per application (reconciliation, docs/platform.md).
	ApplicationHeader string `yaml:"applicationHeader"`
	// Capacity, when set, bounds what the provider runs at once; requests
	// of routes with the fair-admission policy wait beyond it, in weighted
	// fair order (nil: no bound, nothing waits).
	Capacity *Capacity `yaml:"capacity"`
}

// Capacity is what a provider runs at once: give one bound or both.
type Capacity struct {
	// MaxConcurrent bounds the admitted requests in flight (0: no bound).
	MaxConcurrent int `yaml:"maxConcurrent"`
	// MaxTokensInFlight bounds the sum over admitted requests in flight of
	// the prompt estimate plus the output bound (0: no bound).
	MaxTokensInFlight int64 `yaml:"maxTokensInFlight"`
}

// Admission is the document's fair-admission section: the price of a
// request's work and the service classes applications are granted.
type Admission struct {
	// InputWeight and OutputWeight price work: InputWeight per prompt token
	// plus OutputWeight per output token (0: the defaults, 1 and 2).
	InputWeight  float64 `yaml:"inputWeight"`
	OutputWeight float64 `yaml:"outputWeight"`
	// Classes are the service classes by name; "standard", every
	// application's class unless it is granted another, exists without
	// being listed (no share, no deadline, unbounded queues).
	Classes map[string]AdmissionClass `yaml:"classes"`
}

// AdmissionClass is one service class (docs/fairness.md#service-classes).
type AdmissionClass struct {
	// ReservedShare is the fraction (0..1) of each capacity bound the class
	// is owed while it has work waiting: a floor idle classes lend out.
	ReservedShare float64 `yaml:"reservedShare"`
	// MaxShare caps the fraction of the capacity the class's running
	// requests hold (0: no cap; at least reservedShare).
	MaxShare float64 `yaml:"maxShare"`
	// DefaultDeadline is how long a request may wait for its start when the
	// client asks none (0: no deadline).
	DefaultDeadline Duration `yaml:"defaultDeadline"`
	// MaxDeadline caps the deadline a client may ask for (0: no cap).
	MaxDeadline Duration `yaml:"maxDeadline"`
	// MaxQueuedWork bounds the work (prompt tokens times inputWeight plus
	// output bound times outputWeight) one application may have waiting in
	// the class on one provider (0: no bound).
	MaxQueuedWork float64 `yaml:"maxQueuedWork"`
	// BurstHeadroom is the fraction (0 to below 1) of each capacity bound
	// that an application of the class holding at least its fair share
	// leaves free when it starts a request, for applications holding less
	// (0: none; docs/fairness.md#burst-headroom).
	BurstHeadroom float64 `yaml:"burstHeadroom"`
}

// Auth is the credential header the gateway adds upstream.
type Auth struct {
	Header string `yaml:"header"`
	Value  string `yaml:"value"`
}

// Application is an API consumer with its keys, stored only as hashes.
type Application struct {
	ID      string   `yaml:"id"`
	Name    string   `yaml:"name"`
	APIKeys []string `yaml:"apiKeys"`
	// Keys are keys with an identity and an optional expiry (the platform
	// issues these); both lists may be used together.
	Keys []APIKey `yaml:"keys"`
	// Admission is the application's place in fair admission (nil: class
	// standard, weight 1).
	Admission *ApplicationAdmission `yaml:"admission"`
}

// ApplicationAdmission grants an application a service class and a
// fair-share weight; a request can never choose either.
type ApplicationAdmission struct {
	// Class names a class of admission.classes, or "standard" ("": standard).
	Class string `yaml:"class"`
	// Weight is the application's share relative to weight-1 applications
	// while both have work waiting (0: 1).
	Weight float64 `yaml:"weight"`
}

// APIKey is one key of an application, by its hash.
type APIKey struct {
	// ID names the key in usage reports and logs (not secret).
	ID string `yaml:"id"`
	// Hash is "sha256:" and 64 lowercase hex digits.
	Hash string `yaml:"hash"`
	// ExpiresAt, when set, is the instant (RFC 3339) from which the key is
	// refused with 401, checked at request time.
	ExpiresAt *time.Time `yaml:"expiresAt"`
}

// Route binds a path prefix to a provider and a policy chain.
type Route struct {
	Name     string        `yaml:"name"`
	Context  string        `yaml:"context"`
	Provider string        `yaml:"provider"`
	Policies []PolicyEntry `yaml:"policies"`
	// CORS, when set, lets browsers on the listed origins call the route.
	CORS *CORS `yaml:"cors"`
}

// CORS is a route's cross-origin policy. Preflight requests (OPTIONS) are
// answered by the gateway without running the chain.
type CORS struct {
	// AllowOrigins lists origins ("https://app.example.com") or "*" for any.
	AllowOrigins []string `yaml:"allowOrigins"`
	// AllowHeaders adds request headers (exact or prefix*) to the default
	// set a preflight may ask for.
	AllowHeaders []string `yaml:"allowHeaders"`
	// ExposeHeaders adds response headers (exact or prefix*) to the default
	// set a page may read.
	ExposeHeaders []string `yaml:"exposeHeaders"`
	// MaxAge is how long a browser may cache a preflight answer (unset: the
	// browser's default).
	MaxAge Duration `yaml:"maxAge"`
}

// PolicyEntry is one chain member.
type PolicyEntry struct {
	Name    string         `yaml:"name"`
	Version string         `yaml:"version"`
	Params  map[string]any `yaml:"params"`
	// Resources, when set, attaches the entry to some of the route's
	// resources only; the chain runner skips it for the others.
	Resources *Resources `yaml:"resources"`
}

// Resources selects the resources (endpoint paths without the /v1 prefix:
// "/chat/completions", "/completions", "/embeddings", "/responses",
// "/messages") an entry applies to: Include lists them, or Exclude lists the
// ones it does not apply to. Exactly one of the two is set.
type Resources struct {
	Include []string `yaml:"include"`
	Exclude []string `yaml:"exclude"`
}
