package delivery_test

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"sluice/deployment"
	"sluice/platform/delivery"
	"sluice/platform/secrets"
)

func TestRedactCounters(t *testing.T) {
	for _, tt := range []struct {
		name    string
		in, out deployment.Redis
	}{
		{"url password", deployment.Redis{URL: "redis://u:pw@h:6379/0"}, deployment.Redis{URL: "redis://u:xxxxx@h:6379/0"}},
		{"password only", deployment.Redis{URL: "rediss://:pw@h:6379/2"}, deployment.Redis{URL: "rediss://:xxxxx@h:6379/2"}},
		{"no password", deployment.Redis{URL: "redis://h:6379/0"}, deployment.Redis{URL: "redis://h:6379/0"}},
		{"password field", deployment.Redis{Addrs: []string{"a:1", "b:2"}, Username: "u", Password: "pw"},
			deployment.Redis{Addrs: []string{"a:1", "b:2"}, Username: "u", Password: delivery.Redacted}},
		{"unparseable url", deployment.Redis{URL: "redis://u:p w@h:1%"}, deployment.Redis{URL: delivery.Redacted}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := deployment.Counters{Backend: "redis", Redis: tt.in}
			keep := in.Redis.URL
			got := delivery.RedactCounters(in)
			if !reflect.DeepEqual(got.Redis, tt.out) || got.Backend != "redis" {
				t.Fatalf("got %+v, want %+v", got.Redis, tt.out)
			}
			if in.Redis.URL != keep {
				t.Fatal("the argument was changed")
			}
		})
	}
}

// A setting reads back as sealed, with the document's defaults; the zero
// setting is nothing stored.
func TestSealCounters(t *testing.T) {
	box, err := secrets.New(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	c := deployment.Counters{Backend: "redis", Redis: deployment.Redis{URL: "redis://u:secret@h:6379/0", FailureMode: "closed",
		ReadTimeout: deployment.Duration(time.Second)}}
	sealed, err := delivery.SealCounters(box, c)
	if err != nil || sealed == nil {
		t.Fatalf("seal: %v", err)
	}
	if bytes.Contains(sealed, []byte("secret")) {
		t.Fatal("sealed value holds the password in clear")
	}
	got, err := delivery.OpenCounters(box, sealed)
	if err != nil {
		t.Fatal(err)
	}
	// Opening fills the section's defaults, as loading a file does.
	want := &deployment.Deployment{Counters: c}
	deployment.ApplyDefaults(want)
	if !reflect.DeepEqual(got, want.Counters) {
		t.Fatalf("read back %+v, want %+v", got, want.Counters)
	}
	if _, err := delivery.OpenCounters(nil, sealed); err == nil {
		t.Fatal("opened without a key")
	}
	if s, err := delivery.SealCounters(box, deployment.Counters{}); s != nil || err != nil {
		t.Fatalf("zero setting sealed to %x, %v", s, err)
	}
	if got, err := delivery.OpenCounters(box, nil); err != nil || !reflect.DeepEqual(got, deployment.Counters{}) {
		t.Fatalf("nothing stored: %+v, %v", got, err)
	}
}
