package counterconfig

import (
	"reflect"
	"testing"
	"time"

	"sluice/counter/redisstore"
	"sluice/deployment"
)

func TestRedisOptions(t *testing.T) {
	c := deployment.Redis{
		URL: "redis://h:1/2", Cluster: true, Username: "u", Password: "p", TLS: true, KeyPrefix: "x:", FailureMode: "closed",
		DialTimeout: deployment.Duration(time.Second), ReadTimeout: deployment.Duration(2 * time.Second),
		WriteTimeout: deployment.Duration(3 * time.Second), PoolSize: 7,
	}
	got := redisOptions(c)
	want := redisstore.Options{URL: "redis://h:1/2", Cluster: true, Username: "u", Password: "p", TLS: true, KeyPrefix: "x:", FailureMode: "closed",
		DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 3 * time.Second, PoolSize: 7}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("redisOptions = %+v, want %+v", got, want)
	}
}
