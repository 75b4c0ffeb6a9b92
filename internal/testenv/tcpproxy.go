package testenv

import (
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
)

// TCPProxy forwards a local port to a real server. Down makes the server
// unreachable through it (connections refused, open ones cut); Up brings it
// back on the same port. Tests use it to take a real engine or endpoint away
// from searchsync without stopping it for the other tests.
type TCPProxy struct {
	t      testing.TB
	Addr   string // host:port to give searchsync
	target string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
	cut   bool // Cut: accepted connections are closed at once
}

// NewTCPProxy starts a proxy to target (host:port); it is closed at cleanup.
//
// Its port is chosen anew while the first listen finds it taken: FreeAddr's
// port may be bound by another process between its check and the listen
// (another test's proxy, down for a while, coming back up on it).
func NewTCPProxy(t testing.TB, target string) *TCPProxy {
	t.Helper()
	p := &TCPProxy{t: t, target: target, conns: map[net.Conn]bool{}}
	var err error
	for range 10 {
		p.Addr = FreeAddr(t)
		if err = p.listen(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("testenv: proxy listen %s: %v", p.Addr, err)
	}
	t.Cleanup(p.Down)
	return p
}

// Up listens again (after Down), or forwards again (after Cut).
func (p *TCPProxy) Up() {
	p.t.Helper()
	if err := p.listen(); err != nil {
		p.t.Fatalf("testenv: proxy listen %s: %v", p.Addr, err)
	}
}

// listen starts accepting on Addr (nothing when it already does) and
// forwarding again after Cut.
func (p *TCPProxy) listen() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	if p.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", p.Addr)
	if err != nil {
		return err
	}
	p.ln = ln
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.pipe(c)
		}
	}()
	return nil
}

// Down stops listening and cuts every open connection.
func (p *TCPProxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	p.cutLocked()
}

// Cut makes the server unreachable while the proxy keeps its port: open
// connections are cut, new ones closed as soon as they are accepted (the
// client reads EOF, where Down gives "connection refused"), until Up. A
// port kept cannot be taken by another test meanwhile, which Down's can.
func (p *TCPProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	p.cutLocked()
}

func (p *TCPProxy) cutLocked() {
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *TCPProxy) pipe(c net.Conn) {
	p.mu.Lock()
	cut := p.cut
	p.mu.Unlock()
	if cut {
		c.Close()
		return
	}
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.ln == nil || p.cut {
		p.mu.Unlock()
		c.Close()
		u.Close()
		return
	}
	p.conns[c], p.conns[u] = true, true
	p.mu.Unlock()
	// A copy ends when either side closes; its error says only that.
	go func() { _, _ = io.Copy(u, c); u.Close() }()
	_, _ = io.Copy(c, u)
	c.Close()
}

// ViaProxy is a proxy in front of db's server and db's URL through it: a
// test takes the database away from searchsync (Cut, Down) without taking
// it from the other tests.
func (db *DB) ViaProxy(t testing.TB) (*TCPProxy, string) {
	t.Helper()
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatalf("testenv: database URL: %v", err)
	}
	px := NewTCPProxy(t, u.Host)
	via := *u
	via.Host = px.Addr
	return px, via.String()
}
