package pull

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// HTTPFeed is the platform's gateway API: GET /api/v1/gateway/deployment
// (long poll) and POST /api/v1/gateway/status, with the gateway's token.
type HTTPFeed struct {
	// URL is the platform's base URL (http://host:port).
	URL   string
	Token string
	// Client defaults to one with keep-alive and no overall timeout (each
	// call gets its own deadline from the wait).
	Client *http.Client
}

func (f *HTTPFeed) client() *http.Client {
	if f.Client != nil {
		return f.Client
	}
	return http.DefaultClient
}

func (f *HTTPFeed) endpoint(path string) string {
	return strings.TrimRight(f.URL, "/") + "/api/v1/gateway/" + path
}

// Next long-polls for a version above after.
func (f *HTTPFeed) Next(ctx context.Context, after int64, wait time.Duration) (*Update, error) {
	ctx, cancel := context.WithTimeout(ctx, wait+15*time.Second)
	defer cancel()
	q := url.Values{"after": {strconv.FormatInt(after, 10)}, "wait": {strconv.Itoa(int(wait / time.Second))}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.endpoint("deployment")+"?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+f.Token)
	resp, err := f.client().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusNoContent:
		return nil, nil
	case http.StatusOK:
	default:
		return nil, fmt.Errorf("platform answered %d: %s", resp.StatusCode, bytes.TrimSpace(body))
	}
	var d struct {
		Version  int64  `json:"version"`
		Document string `json:"document"`
	}
	if err := json.Unmarshal(body, &d); err != nil {
		return nil, fmt.Errorf("platform deployment: %w", err)
	}
	return &Update{Version: d.Version, Document: []byte(d.Document)}, nil
}

// Report sends a check-in.
func (f *HTTPFeed) Report(ctx context.Context, s Status) error {
	body := map[string]any{"version": s.Version, "result": s.Result}
	if s.Error != "" {
		e := s.Error
		if len(e) > 4000 {
			e = e[:4000]
		}
		body["error"] = e
	}
	if len(s.KeysLastUsed) > 0 {
		m := make(map[string]string, len(s.KeysLastUsed))
		for id, t := range s.KeysLastUsed {
			m[id] = t.UTC().Format(time.RFC3339Nano)
		}
		body["keysLastUsed"] = m
	}
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.endpoint("status"), bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+f.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := f.client().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("platform answered %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
	}
	return nil
}
