package e2e

// The usage meter's delivery end to end, process by process: `sluice
// platform`, `sluice gateway --platform` and `sluice mock-llm`, with the
// gateway killed with SIGKILL under load and the platform down for a while
// (docs/meter.md, "Delivery guarantee"), and a spool that reaches its bound.

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"sluice/internal/proctest"
)

// meterRig is a platform with one provider at the mock, one application
// with a key, and a gateway token; gateways run from the same cache (and so
// the same spool directory, <cache>.meter).
type meterRig struct {
	t     *testing.T
	bin   string
	data  string
	plat  *proctest.Proc
	admin *admin
	gwID  string
	gwTok string
	key   string
	cache string
}

func startMeterRig(t *testing.T) *meterRig {
	t.Helper()
	r := &meterRig{t: t, bin: sluiceBin.Path(t), data: t.TempDir(), cache: filepath.Join(t.TempDir(), "deployment.cache")}
	mock := proctest.StartMock(t, r.bin).URL
	r.startPlatform("platform", "127.0.0.1:0")
	tok := r.admin.create("/gateways", map[string]any{"name": "edge-1"})
	r.gwID, r.gwTok = tok.ID, tok.Token
	prov := r.admin.create("/providers", map[string]any{"name": "openai", "type": "openai", "url": mock, "apiKey": e2eUpstreamKey}).ID
	app := r.admin.create("/applications", map[string]any{"name": "metered", "providers": []string{prov}}).ID
	r.key = r.admin.create("/applications/"+app+"/keys", nil).Key
	return r
}

// startPlatform starts `sluice platform` on listen over the rig's data
// directory (the same database every time).
func (r *meterRig) startPlatform(name, listen string) {
	r.t.Helper()
	r.plat = proctest.Start(r.t, r.bin, proctest.Spec{Name: name, ReadyPath: "/healthz",
		Env:  withEnv("SLUICE_ADMIN_TOKEN=" + e2eAdminToken),
		Args: []string{"platform", "--admin-listen", listen, "--data", r.data}})
	r.admin = newAdmin(r.t, r.plat.URL)
}

// platformAddr is the platform's host:port.
func (r *meterRig) platformAddr() string { return strings.TrimPrefix(r.plat.URL, "http://") }

// startGateway starts a gateway on the rig's cache (and spool).
func (r *meterRig) startGateway(name string, extra ...string) *proctest.Proc {
	r.t.Helper()
	args := append([]string{"--platform", r.plat.URL, "--token", r.gwTok, "--cache", r.cache, "--platform-timeout", "2s"}, extra...)
	return proctest.StartGateway(r.t, r.bin, name, args...)
}

// records reads every usage record id the platform holds (the CSV export
// streams them all), with the number of times each appears.
func (r *meterRig) records() map[string]int {
	r.t.Helper()
	status, _, body := r.admin.do("GET", "/usage/records?format=csv&from=2000-01-01T00:00:00Z", nil)
	if status != http.StatusOK {
		r.t.Fatalf("GET /usage/records: %d %s", status, body)
	}
	rows, err := csv.NewReader(bytes.NewReader(body)).ReadAll()
	if err != nil {
		r.t.Fatalf("usage CSV: %v", err)
	}
	if len(rows) == 0 || rows[0][0] != "id" {
		r.t.Fatalf("usage CSV without its header: %.200s", body)
	}
	ids := map[string]int{}
	for _, row := range rows[1:] {
		ids[row[0]]++
	}
	return ids
}

// waitShipped waits until gw's spool has nothing pending and the platform
// holds at least min records.
func (r *meterRig) waitShipped(gw *proctest.Proc, within time.Duration) {
	r.t.Helper()
	deadline := time.Now().Add(within)
	for metricValue(r.t, gw, "sluice_meter_spool_pending_records") != 0 {
		if time.Now().After(deadline) {
			r.t.Fatalf("%s: %v records still pending in the spool after %v", gw.Name,
				metricValue(r.t, gw, "sluice_meter_spool_pending_records"), within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// outcome is what the client saw of one request.
type outcome struct {
	// status is the response's status (0: no response headers).
	status int
	// complete: the body was read to its end (Content-Length, or a stream's
	// final chunk after its terminal event), whatever the status.
	complete bool
}

// meterLoad sends chat completions (streamed and not, small and large
// answers) from several workers to whichever gateway target points at,
// and keeps, by the X-Request-Id the gateway answered (its record's id),
// what each client saw.
type meterLoad struct {
	key    string
	target atomic.Pointer[string]
	http   *http.Client

	mu       sync.Mutex
	byID     map[string]outcome
	complete int
	refused  int // sends no gateway took: the dial failed
	// headerless counts sends a gateway took but died on before any
	// response header: the record of such a request may be stored (it is
	// appended before the answer leaves the process) with an id no client
	// saw.
	headerless int
	non200     int // complete answers with another status than 200
	stop       chan struct{}
	done       sync.WaitGroup
}

func startMeterLoad(key, gateway string, workers int) *meterLoad {
	l := &meterLoad{key: key, byID: map[string]outcome{}, stop: make(chan struct{}),
		http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}, Timeout: 30 * time.Second}}
	l.setTarget(gateway)
	bodies := [][]byte{
		chatReq{Model: "gpt-4o-mini", Text: "metered, small", MaxTokens: 20}.body(),
		chatReq{Model: "gpt-4o-mini", Text: "metered, streamed", MaxTokens: 40, Stream: true, IncludeUsage: true}.body(),
		// A body of several buffers: its tail is what the record's append
		// must precede.
		chatReq{Model: "gpt-4o-mini", Text: "metered, large", MaxTokens: 3000}.body(),
		chatReq{Model: "gpt-4o-mini", Text: "metered, streamed without usage", MaxTokens: 30, Stream: true}.body(),
	}
	for w := range workers {
		l.done.Add(1)
		go func() {
			defer l.done.Done()
			for i := w; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				l.one(bodies[i%len(bodies)])
			}
		}()
	}
	return l
}

func (l *meterLoad) setTarget(u string) { l.target.Store(&u) }

func (l *meterLoad) one(body []byte) {
	base := *l.target.Load()
	req, err := http.NewRequest(http.MethodPost, base+"/openai/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		panic(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+l.key)
	resp, err := l.http.Do(req)
	if err != nil {
		var op *net.OpError
		l.mu.Lock()
		if errors.As(err, &op) && op.Op == "dial" {
			l.refused++
		} else {
			l.headerless++
		}
		l.mu.Unlock()
		time.Sleep(5 * time.Millisecond) // the gateway is down: do not spin
		return
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	o := outcome{status: resp.StatusCode, complete: err == nil}
	if o.complete && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") && !bytes.Contains(b, []byte("[DONE]")) {
		o.complete = false
	}
	id := resp.Header.Get("X-Request-Id")
	l.mu.Lock()
	defer l.mu.Unlock()
	if id == "" {
		panic("a gateway answer without X-Request-Id")
	}
	if _, dup := l.byID[id]; dup {
		panic("the gateway answered request id " + id + " twice")
	}
	l.byID[id] = o
	if o.complete {
		l.complete++
		if o.status != http.StatusOK {
			l.non200++
		}
	}
}

// counts returns the complete answers, the complete non-200 answers and
// the refused sends so far.
func (l *meterLoad) counts() (complete, non200, refused int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.complete, l.non200, l.refused
}

// cutBeforeHeader is the number of sends a gateway took but answered no
// header to (it was killed).
func (l *meterLoad) cutBeforeHeader() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.headerless
}

// waitMore waits until n more complete answers than now were seen.
func (l *meterLoad) waitMore(t *testing.T, n int) {
	t.Helper()
	c0, _, _ := l.counts()
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, _, _ := l.counts()
		if c >= c0+n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d more complete answers within 60s", c-c0, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (l *meterLoad) finish() map[string]outcome {
	close(l.stop)
	l.done.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byID
}

// checkDelivery compares what the clients saw with the platform's records:
// no record twice, every complete answer's record present; the records of
// answers the clients did not get in full (the gateway was killed
// meanwhile) may be either way. A record of an id no client was answered
// with is one of a request the gateway died on before its answer's header
// left: there are at most headerless of them. It returns the number of
// records of incomplete answers and of ids no client saw.
func checkDelivery(t *testing.T, seen map[string]outcome, stored map[string]int, headerless int) (crashWindow, unseen, missingIncomplete int) {
	t.Helper()
	for id, n := range stored {
		if n != 1 {
			t.Errorf("record %s stored %d times", id, n)
		}
		o, ok := seen[id]
		switch {
		case !ok:
			unseen++
			if unseen > headerless {
				t.Errorf("record %s stored, but no client was answered with that id (%d such records, %d sends cut before a header)",
					id, unseen, headerless)
			}
		case !o.complete:
			crashWindow++
		}
	}
	for id, o := range seen {
		if _, ok := stored[id]; ok {
			continue
		}
		if o.complete {
			t.Errorf("request %s answered in full (status %d) but its record never reached the platform", id, o.status)
		} else {
			missingIncomplete++
		}
	}
	return crashWindow, unseen, missingIncomplete
}

// The gateway is killed with SIGKILL under load and restarted on the same
// spool, then the platform is killed while traffic goes on (and the gateway
// is killed once more while it cannot ship), then the platform comes back
// on the same database: every record reaches the platform exactly once, and
// every request a client got a complete answer for has its record.
func TestMeterSurvivesKill9AndPlatformOutage(t *testing.T) {
	r := startMeterRig(t)
	gw := r.startGateway("gateway-1")
	r.admin.waitApplied(r.gwID)
	load := startMeterLoad(r.key, gw.URL, 8)
	defer func() {
		select {
		case <-load.stop:
		default:
			load.finish()
		}
	}()
	load.waitMore(t, 150)

	kill := func(p *proctest.Proc) {
		t.Helper()
		p.Signal(t, syscall.SIGKILL)
		p.WaitExit(t, 10*time.Second)
	}
	// 1. kill -9 under load, restart on the same spool.
	kill(gw)
	gw = r.startGateway("gateway-2")
	load.setTarget(gw.URL)
	load.waitMore(t, 150)

	// 2. The platform goes down (kill -9: its database must hold whole
	// batches only); the gateway keeps answering, the spool fills.
	platAddr := r.platformAddr()
	kill(r.plat)
	_, non200Before, _ := load.counts()
	load.waitMore(t, 150)
	if _, non200, _ := load.counts(); non200 != non200Before {
		t.Fatalf("%d answers other than 200 with the platform down", non200-non200Before)
	}
	gw.WaitLog(t, 10*time.Second, "usage records not shipped; retrying")
	pendingBefore := metricValue(t, gw, "sluice_meter_spool_pending_records")
	if pendingBefore == 0 {
		t.Fatal("nothing pending in the spool with the platform down")
	}

	// 3. kill -9 again while the records cannot be shipped; the gateway
	// starts from its cache and its spool.
	kill(gw)
	gw = r.startGateway("gateway-3")
	load.setTarget(gw.URL)
	gw.WaitLog(t, 5*time.Second, "serving the cached deployment")
	load.waitMore(t, 150)

	// 4. The platform comes back on the same database and address.
	r.startPlatform("platform-2", platAddr)
	load.waitMore(t, 150)
	seen := load.finish()
	// The back-off is at most 30 s.
	r.waitShipped(gw, 45*time.Second)
	stored := r.records()

	complete, non200, refused := load.counts()
	headerless := load.cutBeforeHeader()
	window, unseen, lost := checkDelivery(t, seen, stored, headerless)
	dropped := metricValue(t, gw, "sluice_meter_spool_dropped_records_total")
	t.Logf("answered %d requests (%d complete, %d complete non-200), %d sends refused while a gateway was down, %d cut before a header; "+
		"platform holds %d records, each once; %d of them of answers cut by a kill, %d of sends cut before a header; "+
		"%d cut answers without a record; %v pending before the second kill; %v dropped",
		len(seen), complete, non200, refused, headerless, len(stored), window, unseen, lost, pendingBefore, dropped)
	if dropped != 0 {
		t.Errorf("%v records dropped under the default bound", dropped)
	}
	if non200 != 0 {
		t.Errorf("%d complete answers other than 200", non200)
	}
}

// A spool of the smallest bound fills while the platform is down: the
// oldest records are dropped, counted on /metrics and logged at warn, the
// gateway keeps answering 200, and once the platform is back every record
// not dropped arrives once.
func TestMeterSpoolBoundDropsCountedAndLogged(t *testing.T) {
	r := startMeterRig(t)
	// The smallest bound the spool takes: two records of 64 KiB and two
	// segments (deployment.minSpoolBytes); segments of 8.5 KiB.
	const bound = 2*64<<10 + 2*4<<10
	gw := r.startGateway("gateway", "--spool-max-bytes", fmt.Sprint(bound))
	r.admin.waitApplied(r.gwID)
	gw.WaitLog(t, 5*time.Second, "usage records shipped to the platform", fmt.Sprintf("max_bytes=%d", bound))

	platAddr := r.platformAddr()
	r.plat.Signal(t, syscall.SIGTERM)
	r.plat.WaitExit(t, 40*time.Second)

	load := startMeterLoad(r.key, gw.URL, 4)
	deadline := time.Now().Add(90 * time.Second)
	for metricValue(t, gw, "sluice_meter_spool_dropped_records_total") == 0 {
		if time.Now().After(deadline) {
			load.finish()
			t.Fatalf("no record dropped within 90s; spool at %v bytes", metricValue(t, gw, "sluice_meter_spool_bytes"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	load.waitMore(t, 50) // and it keeps serving past the bound
	seen := load.finish()
	complete, non200, refused := load.counts()
	if cut := load.cutBeforeHeader(); non200 != 0 || refused != 0 || cut != 0 || complete != len(seen) {
		t.Fatalf("with the spool full: %d complete of %d, %d not 200, %d refused, %d cut before a header", complete, len(seen), non200, refused, cut)
	}
	line := gw.WaitLog(t, 5*time.Second, "spool: full, dropped the oldest segment", "level=WARN", "records=")
	dropped := metricValue(t, gw, "sluice_meter_spool_dropped_records_total")
	if b := metricValue(t, gw, "sluice_meter_spool_bytes"); b > bound {
		t.Errorf("spool at %v bytes, above its bound of %d", b, bound)
	}
	appended := metricValue(t, gw, "sluice_meter_spool_appended_total")

	r.startPlatform("platform-2", platAddr)
	r.waitShipped(gw, 45*time.Second)
	stored := r.records()
	for id, n := range stored {
		if n != 1 {
			t.Errorf("record %s stored %d times", id, n)
		}
		if _, ok := seen[id]; !ok {
			t.Errorf("record %s stored, but no client was answered with that id", id)
		}
	}
	if got, want := float64(len(stored)), appended-dropped; got != want {
		t.Errorf("platform holds %v records; appended %v - dropped %v = %v", got, appended, dropped, want)
	}
	t.Logf("%d answers, all 200; %v appended, %v dropped (%q), %d stored once each", len(seen), appended, dropped, line, len(stored))
}
