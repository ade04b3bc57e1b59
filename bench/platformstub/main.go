// Command platformstub stands in for the platform's gateway API in
// benchmarks (bench/meter-on-off.sh with SINK=spool): it serves each
// gateway token its deployment document, takes check-ins, and accepts usage
// batches without storing them, so a gateway shipping its spool runs
// without the platform's ingest on the same cores. Not for tests of the
// platform's behaviour: it validates nothing.
//
//	platformstub -listen 127.0.0.1:9000 -doc on=on.yaml -doc off=off.yaml
//
// GET /stub/usage answers the number of records received (lines of the
// usage batches).
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// docs maps a gateway token to its deployment document.
type docs map[string]string

func (d docs) String() string { return fmt.Sprint(map[string]string(d)) }

func (d docs) Set(v string) error {
	token, path, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("want token=path, got %q", v)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	d[token] = string(b)
	return nil
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	byToken := docs{}
	flag.Var(byToken, "doc", "token=path: the deployment document (rendered YAML) served to that token; repeatable")
	flag.Parse()
	var records atomic.Int64
	mux := http.NewServeMux()
	token := func(r *http.Request) (string, bool) {
		t, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		_, known := byToken[t]
		return t, ok && known
	}
	mux.HandleFunc("GET /api/v1/gateway/deployment", func(w http.ResponseWriter, r *http.Request) {
		t, ok := token(r)
		if !ok {
			http.Error(w, "unknown token", http.StatusUnauthorized)
			return
		}
		if after, _ := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64); after < 1 {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{"version": 1, "document": byToken[t]})
			return
		}
		wait, _ := strconv.Atoi(r.URL.Query().Get("wait"))
		select {
		case <-r.Context().Done():
		case <-time.After(time.Duration(wait) * time.Second):
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /api/v1/gateway/status", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /api/v1/gateway/usage", func(w http.ResponseWriter, r *http.Request) {
		if _, ok := token(r); !ok {
			http.Error(w, "unknown token", http.StatusUnauthorized)
			return
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		n := bytes.Count(b, []byte{'\n'})
		if len(b) > 0 && b[len(b)-1] != '\n' {
			n++
		}
		records.Add(int64(n))
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, "{\"stored\":%d}\n", n)
	})
	mux.HandleFunc("GET /stub/usage", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, records.Load())
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	log.Fatal(http.ListenAndServe(*listen, mux))
}
