// Package natstest gives tests a real NATS server with JetStream: the shared
// one started by scripts/nats.sh (SEARCHSYNC_NATS_URL, default
// nats://127.0.0.1:4222), or a nats-server process of the test's own, on a
// free port with its own store directory, that the test may stop and start
// again. It also reads a stream back for assertions.
package natstest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultURL is where scripts/nats.sh starts the shared server.
const DefaultURL = "nats://127.0.0.1:4222"

const hint = "start it with `scripts/nats.sh start` (installs Debian's nats-server) or set SEARCHSYNC_NATS_URL"

// URL returns the shared server's URL after checking that it answers with
// JetStream; the test fails (never skips) when it does not.
func URL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("SEARCHSYNC_NATS_URL")
	if u == "" {
		u = DefaultURL
	}
	if err := ping(u); err != nil {
		t.Fatalf("natstest: no NATS JetStream at %s: %v; %s", u, err, hint)
	}
	return u
}

func ping(url string, opts ...natsgo.Option) error {
	nc, err := natsgo.Connect(url, append([]natsgo.Option{natsgo.Timeout(3 * time.Second)}, opts...)...)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	return err
}

// Server is a nats-server process owned by one test.
type Server struct {
	URL  string
	Port int
	Dir  string // JetStream store and log

	t    testing.TB
	noJS bool
	conf string          // configuration file contents (StartConfig)
	opts []natsgo.Option // how the readiness check connects
	mu   sync.Mutex
	cmd  *exec.Cmd
}

// Binary finds nats-server.
func Binary(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/nats-server", "/usr/bin/nats-server"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatalf("natstest: nats-server not found; %s", hint)
	return ""
}

// Start runs a new nats-server with JetStream on a free port; it is stopped
// at cleanup.
func Start(t testing.TB) *Server {
	t.Helper()
	return start(t, false)
}

// StartWithoutJetStream runs a nats-server without JetStream, to prove that
// a consumer refuses it.
func StartWithoutJetStream(t testing.TB) *Server {
	t.Helper()
	return start(t, true)
}

// StartConfig runs a nats-server with JetStream and the configuration conf
// (authorization, accounts, tls blocks; the listen address and the store
// are added), on a free port. It is ready when a client connecting with
// opts gets JetStream account info.
func StartConfig(t testing.TB, conf string, opts ...natsgo.Option) *Server {
	t.Helper()
	return startWith(t, false, conf, opts)
}

func start(t testing.TB, noJS bool) *Server {
	t.Helper()
	return startWith(t, noJS, "", nil)
}

func startWith(t testing.TB, noJS bool, conf string, opts []natsgo.Option) *Server {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("natstest: free port: %v", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &Server{Port: port, URL: "nats://127.0.0.1:" + strconv.Itoa(port), Dir: t.TempDir(), t: t, noJS: noJS, conf: conf, opts: opts}
	t.Cleanup(s.Stop)
	s.Restart()
	return s
}

// Restart starts the server again (same port, same store) after Stop or
// Kill, and waits until JetStream answers.
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return
	}
	logf, err := os.OpenFile(filepath.Join(s.Dir, "nats.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.t.Fatalf("natstest: %v", err)
	}
	defer logf.Close()
	args := []string{"-a", "127.0.0.1", "-p", strconv.Itoa(s.Port)}
	if !s.noJS {
		args = append(args, "-js", "-sd", filepath.Join(s.Dir, "store"))
	}
	if s.conf != "" {
		f := filepath.Join(s.Dir, "nats.conf")
		if err := os.WriteFile(f, []byte(s.conf), 0o600); err != nil {
			s.t.Fatalf("natstest: %v", err)
		}
		args = append(args, "-c", f)
	}
	cmd := exec.Command(Binary(s.t), args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("natstest: start nats-server: %v", err)
	}
	s.cmd = cmd
	deadline := time.Now().Add(30 * time.Second)
	ready := func() bool {
		if s.noJS {
			nc, err := natsgo.Connect(s.URL)
			if err == nil {
				nc.Close()
			}
			return err == nil
		}
		return ping(s.URL, s.opts...) == nil
	}
	for !ready() {
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(s.Dir, "nats.log"))
			s.t.Fatalf("natstest: nats-server on port %d not ready within 30s; log:\n%s", s.Port, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// SetJetStream decides whether the next Restart runs the server with
// JetStream (the same store) or without it, so that a test can take
// JetStream away from a consumer that is connected already.
func (s *Server) SetJetStream(on bool) {
	s.mu.Lock()
	s.noJS = !on
	s.mu.Unlock()
}

// SetConfig replaces the configuration (StartConfig) and the readiness
// check's options for the next Restart: a test rotates credentials with it.
func (s *Server) SetConfig(conf string, opts ...natsgo.Option) {
	s.mu.Lock()
	s.conf, s.opts = conf, opts
	s.mu.Unlock()
}

// Stop shuts the server down (SIGTERM) and waits for it to exit; safe to
// call when it is already stopped.
func (s *Server) Stop() { s.signal(syscall.SIGTERM) }

// Kill ends the server with SIGKILL.
func (s *Server) Kill() { s.signal(syscall.SIGKILL) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(sig) // an exited process is what we want
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }() // a signalled exit is an error by design
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
	s.cmd = nil
}

// Msg is one stored message.
type Msg struct {
	Sequence uint64
	Subject  string
	Header   natsgo.Header
	Data     []byte
}

// Messages reads every message of the stream, in stream order.
func Messages(t testing.TB, url, stream string) []Msg {
	t.Helper()
	msgs, err := ReadStream(context.Background(), url, stream)
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	return msgs
}

// ReadStream reads every message of the stream, in stream order, with an
// ordered consumer.
func ReadStream(ctx context.Context, url, stream string) ([]Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	nc, err := natsgo.Connect(url)
	if err != nil {
		return nil, fmt.Errorf("read stream %s: %w", stream, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("read stream %s: %w", stream, err)
	}
	n := s.CachedInfo().State.Msgs
	out := make([]Msg, 0, n)
	if n == 0 {
		return out, nil
	}
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, fmt.Errorf("read stream %s: %w", stream, err)
	}
	for uint64(len(out)) < n {
		batch, err := cons.Fetch(int(min(n-uint64(len(out)), 1000)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, fmt.Errorf("read stream %s: %w", stream, err)
		}
		got := 0
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			out = append(out, Msg{Sequence: md.Sequence.Stream, Subject: m.Subject(), Header: m.Headers(), Data: m.Data()})
			got++
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("read stream %s: %w", stream, err)
		}
		if got == 0 && ctx.Err() != nil {
			return nil, fmt.Errorf("read stream %s: %d of %d messages: %w", stream, len(out), n, ctx.Err())
		}
	}
	return out, nil
}
