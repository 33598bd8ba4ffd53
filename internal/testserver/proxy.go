package testserver

import (
	"bytes"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
)

// Hook decides one proxied request's fate: answer it itself (a fault),
// forward it with forward.ServeHTTP (possibly into a recorder, to rewrite
// the answer), or hijack the connection. It runs on the proxy's goroutines.
type Hook func(w http.ResponseWriter, r *http.Request, forward http.Handler)

// Proxy is an HTTP reverse proxy on a free loopback port in front of one
// server, for fault injection between a real client and a real server. With
// no hook it forwards every request unchanged (the Host header included, so
// signed requests stay valid).
type Proxy struct {
	// URL is the proxy's base URL, e.g. http://127.0.0.1:41234.
	URL string

	srv     *httptest.Server
	forward http.Handler

	mu   sync.Mutex
	hook Hook
}

// NewProxy starts a proxy in front of target (a base URL). Close it when
// done.
func NewProxy(target string) (*Proxy, error) {
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("testserver: proxy target %q is not a base URL", target)
	}
	p := &Proxy{forward: httputil.NewSingleHostReverseProxy(u)}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	p.URL = p.srv.URL
	return p, nil
}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	hook := p.hook
	p.mu.Unlock()
	if hook == nil {
		p.forward.ServeHTTP(w, r)
		return
	}
	hook(w, r, p.forward)
}

// SetHook makes h decide every later request; nil forwards them all.
func (p *Proxy) SetHook(h Hook) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hook = h
}

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() {
	p.srv.CloseClientConnections()
	p.srv.Close()
}

// CutMidBody forwards r, then sends the client the answer's status, headers
// (with the full Content-Length) and the first fraction of its body, and
// closes the connection: the client sees a connection cut in the middle of
// a response body.
func CutMidBody(w http.ResponseWriter, r *http.Request, forward http.Handler, fraction float64) {
	rec := httptest.NewRecorder()
	forward.ServeHTTP(rec, r)
	body := rec.Body.Bytes()
	maps.Copy(w.Header(), rec.Header())
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(rec.Code)
	_, _ = w.Write(body[:int(float64(len(body))*fraction)])
	rc := http.NewResponseController(w)
	_ = rc.Flush() // Hijack would drop what is still buffered
	conn, buf, err := rc.Hijack()
	if err != nil {
		panic(fmt.Sprintf("testserver: hijack: %v", err)) // net/http recovers it and drops the connection
	}
	_ = buf.Flush()
	_ = conn.Close()
}

// Recorded forwards r into a recorder and returns the answer, for a hook
// that rewrites it before writing it to w with WriteRecorded.
func Recorded(r *http.Request, forward http.Handler) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	forward.ServeHTTP(rec, r)
	return rec
}

// WriteRecorded writes a recorded answer with body in place of its own.
func WriteRecorded(w http.ResponseWriter, rec *httptest.ResponseRecorder, body []byte) {
	maps.Copy(w.Header(), rec.Header())
	w.Header().Del("Content-MD5")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(rec.Code)
	_, _ = bytes.NewReader(body).WriteTo(w)
}
