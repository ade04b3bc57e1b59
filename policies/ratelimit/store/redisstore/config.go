package redisstore

import (
	"time"

	"sluice/deployment"
)

// OptionsFromConfig maps the deployment's counters.redis section to Options.
// The gateway adds the services (Logger, Metrics, Now). Package config does
// not import this package, so the mapping lives here without a cycle.
func OptionsFromConfig(c deployment.Redis) Options {
	return Options{
		URL:          c.URL,
		Addrs:        c.Addrs,
		Cluster:      c.Cluster,
		Username:     c.Username,
		Password:     c.Password,
		TLS:          c.TLS,
		KeyPrefix:    c.KeyPrefix,
		FailureMode:  c.FailureMode,
		DialTimeout:  time.Duration(c.DialTimeout),
		ReadTimeout:  time.Duration(c.ReadTimeout),
		WriteTimeout: time.Duration(c.WriteTimeout),
		PoolSize:     c.PoolSize,
	}
}
