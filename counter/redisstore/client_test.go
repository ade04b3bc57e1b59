package redisstore

import "testing"

func TestNewValidation(t *testing.T) {
	tests := []struct {
		name string
		o    Options
		ok   bool
	}{
		{"url", Options{URL: "redis://127.0.0.1:1/0"}, true},
		{"addrs", Options{Addrs: []string{"127.0.0.1:1"}}, true},
		{"cluster addrs", Options{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}}, true},
		{"none", Options{}, false},
		{"both", Options{URL: "redis://127.0.0.1:1", Addrs: []string{"127.0.0.1:1"}}, false},
		{"bad mode", Options{URL: "redis://127.0.0.1:1", FailureMode: "maybe"}, false},
		{"bad url", Options{URL: "http://x"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(tc.o)
			if (err == nil) != tc.ok {
				t.Fatalf("New err = %v, want ok=%v", err, tc.ok)
			}
			if s != nil {
				if tc.o.KeyPrefix == "" && s.prefix != DefaultKeyPrefix {
					t.Errorf("prefix %q", s.prefix)
				}
				if s.cluster != (len(tc.o.Addrs) > 1) {
					t.Errorf("cluster = %v", s.cluster)
				}
				_ = s.Close()
			}
		})
	}
}
