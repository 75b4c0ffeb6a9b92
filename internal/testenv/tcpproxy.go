package testenv

import (
	"io"
	"net"
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
}

// NewTCPProxy starts a proxy to target (host:port); it is closed at cleanup.
func NewTCPProxy(t testing.TB, target string) *TCPProxy {
	t.Helper()
	p := &TCPProxy{t: t, Addr: FreeAddr(t), target: target, conns: map[net.Conn]bool{}}
	p.Up()
	t.Cleanup(p.Down)
	return p
}

// Up listens again (after Down).
func (p *TCPProxy) Up() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		return
	}
	ln, err := net.Listen("tcp", p.Addr)
	if err != nil {
		p.t.Fatalf("testenv: proxy listen %s: %v", p.Addr, err)
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
}

// Down stops listening and cuts every open connection.
func (p *TCPProxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *TCPProxy) pipe(c net.Conn) {
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.ln == nil {
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
