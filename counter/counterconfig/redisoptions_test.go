package counterconfig

import (
	"reflect"
	"testing"
	"time"

	"sluice/counter/redisstore"
	"sluice/gateway/config"
)

func TestRedisOptions(t *testing.T) {
	c := config.Redis{
		URL: "redis://h:1/2", Cluster: true, Username: "u", Password: "p", TLS: true, KeyPrefix: "x:", FailureMode: "closed",
		DialTimeout: config.Duration(time.Second), ReadTimeout: config.Duration(2 * time.Second),
		WriteTimeout: config.Duration(3 * time.Second), PoolSize: 7,
	}
	got := redisOptions(c)
	want := redisstore.Options{URL: "redis://h:1/2", Cluster: true, Username: "u", Password: "p", TLS: true, KeyPrefix: "x:", FailureMode: "closed",
		DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 3 * time.Second, PoolSize: 7}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("redisOptions = %+v, want %+v", got, want)
	}
}
