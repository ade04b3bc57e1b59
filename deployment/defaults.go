package deployment

import "time"

// APIVersion is the only document version this release reads.
const APIVersion = "sluice/v1"

// Defaults ApplyDefaults fills into fields left empty. They are the only
// defaults of the document: the gateway serves what it is given.
const (
	DefaultMaxRequestBytes = 10 << 20
	DefaultShutdownGrace   = Duration(30 * time.Second)
	// DefaultReadHeaderTimeout, DefaultReadTimeout and DefaultWriteTimeout
	// bound a client's headers, its body, and each write to it.
	DefaultReadHeaderTimeout = Duration(10 * time.Second)
	DefaultReadTimeout       = Duration(30 * time.Second)
	DefaultWriteTimeout      = Duration(30 * time.Second)
	DefaultProviderTimeout   = Duration(60 * time.Second)
	DefaultProviderRetries   = 2
	DefaultCountersBackend   = "memory"
	DefaultRedisFailureMode  = "open"
	DefaultRedisKeyPrefix    = "sluice:"
	DefaultLeaseMode         = "auto"
	DefaultLeaseTTL          = Duration(2 * time.Second)
	DefaultPolicyVersion     = "v1"
)

// ApplyDefaults fills the documented defaults into d's empty fields. Decoding
// (yamlfile) runs it before Validate; a document built in memory runs it
// before it is served. Explicit values, zero retries included, are kept.
func ApplyDefaults(d *Deployment) {
	if d.Server.MaxRequestBytes == 0 {
		d.Server.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if d.Server.ShutdownGrace == 0 {
		d.Server.ShutdownGrace = DefaultShutdownGrace
	}
	if d.Server.ReadHeaderTimeout == 0 {
		d.Server.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if d.Server.ReadTimeout == 0 {
		d.Server.ReadTimeout = DefaultReadTimeout
	}
	if d.Server.WriteTimeout == 0 {
		d.Server.WriteTimeout = DefaultWriteTimeout
	}
	if d.Counters.Backend == "" {
		d.Counters.Backend = DefaultCountersBackend
	}
	if d.Counters.Redis.FailureMode == "" {
		d.Counters.Redis.FailureMode = DefaultRedisFailureMode
	}
	if d.Counters.Redis.KeyPrefix == "" {
		d.Counters.Redis.KeyPrefix = DefaultRedisKeyPrefix
	}
	if d.Counters.Redis.Leases.Mode == "" {
		d.Counters.Redis.Leases.Mode = DefaultLeaseMode
	}
	if d.Counters.Redis.Leases.TTL == 0 {
		d.Counters.Redis.Leases.TTL = DefaultLeaseTTL
	}
	for i := range d.Providers {
		p := &d.Providers[i]
		if p.Timeout == 0 {
			p.Timeout = DefaultProviderTimeout
		}
		if p.Retries == nil {
			r := DefaultProviderRetries
			p.Retries = &r
		}
	}
	for i := range d.Applications {
		a := &d.Applications[i]
		if a.Name == "" {
			a.Name = a.ID
		}
	}
	for i := range d.Routes {
		for j := range d.Routes[i].Policies {
			if d.Routes[i].Policies[j].Version == "" {
				d.Routes[i].Policies[j].Version = DefaultPolicyVersion
			}
		}
	}
}
