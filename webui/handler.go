package webui

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
)

// securityHeaders go on every response. The console loads only its own
// scripts and styles and talks only to its origin's API; Mantine sets
// inline styles, hence style-src 'unsafe-inline' (no inline scripts).
var securityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; " +
		"img-src 'self' data:; font-src 'self' data:; connect-src 'self'; object-src 'none'; " +
		"base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
	"X-Content-Type-Options": "nosniff",
	"Referrer-Policy":        "no-referrer",
	"X-Frame-Options":        "DENY",
}

// notBuilt is served instead of the console by a binary built without it.
const notBuilt = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sluice</title></head>
<body><main><h1>The console is not in this binary</h1>
<p>This sluice binary was built without the web console (for example by
<code>go build</code> on a fresh clone). Build it with <code>make build</code>
(needs Node.js and npm), or use the API under <a href="/api/v1/openapi.json">/api/v1</a>.</p>
</main></body></html>
`

// file is one built file, held in memory with its gzip form.
type file struct {
	body, gz    []byte
	contentType string
}

// Handler serves a console build: its files by path, and index.html for
// every other GET (the console's routes are client-side). Files under
// assets/ have content hashes in their names and are cached for a year;
// index.html is revalidated on every load. Compressible files are gzipped
// once, here, and served so to clients that accept it. Safe for concurrent
// use: it only reads what New built.
type Handler struct {
	files   map[string]*file
	index   *file
	modTime time.Time
}

// NewHandler reads build (see Build) into memory. A build without
// index.html gives a handler that answers every page with notBuilt.
func NewHandler(build fs.FS) (*Handler, error) {
	h := &Handler{files: map[string]*file{}, modTime: time.Now()}
	err := fs.WalkDir(build, ".", func(p string, d fs.DirEntry, err error) error {
		if p == "." && errors.Is(err, fs.ErrNotExist) {
			return fs.SkipAll // built without the console
		}
		if err != nil || d.IsDir() {
			return err
		}
		body, err := fs.ReadFile(build, p)
		if err != nil {
			return err
		}
		h.files[p] = newFile(p, body)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if idx, ok := h.files["index.html"]; ok {
		h.index = idx
	} else {
		h.index = newFile("index.html", []byte(notBuilt))
	}
	return h, nil
}

func newFile(name string, body []byte) *file {
	f := &file{body: body, contentType: mime.TypeByExtension(path.Ext(name))}
	if f.contentType == "" {
		f.contentType = http.DetectContentType(body)
	}
	switch path.Ext(name) {
	case ".html", ".js", ".css", ".svg", ".json", ".txt", ".map":
		var b bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
		_, _ = zw.Write(body)
		_ = zw.Close()
		if b.Len() < len(body) {
			f.gz = b.Bytes()
		}
	}
	return f
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	for k, v := range securityHeaders {
		w.Header().Set(k, v)
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	name := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
	f, ok := h.files[name]
	switch {
	case ok && name == "index.html":
		w.Header().Set("Cache-Control", "no-cache")
	case ok:
		if strings.HasPrefix(name, "assets/") {
			w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
		} else {
			w.Header().Set("Cache-Control", "no-cache")
		}
	case strings.HasPrefix(name, "assets/") || path.Ext(name) != "":
		// A missing script or image must not be answered with the page:
		// the browser would try to run HTML as JavaScript.
		http.NotFound(w, r)
		return
	default:
		f = h.index
		w.Header().Set("Cache-Control", "no-cache")
	}
	w.Header().Set("Content-Type", f.contentType)
	w.Header().Add("Vary", "Accept-Encoding")
	body := f.body
	if f.gz != nil && acceptsGzip(r) {
		w.Header().Set("Content-Encoding", "gzip")
		body = f.gz
	}
	http.ServeContent(w, r, name, h.modTime, bytes.NewReader(body))
}

// acceptsGzip reports whether Accept-Encoding lists gzip with a non-zero q.
func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if !strings.EqualFold(strings.TrimSpace(enc), "gzip") {
			continue
		}
		q := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
		return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
	}
	return false
}
