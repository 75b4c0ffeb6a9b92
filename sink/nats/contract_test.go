package nats_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/sink"
	"github.com/searchsync/searchsync/sink/nats"
	"github.com/searchsync/searchsync/sink/nats/natstest"
	"github.com/searchsync/searchsync/sink/sinktest"
)

// The contract suite against a nats-server of the test's own (Break stops
// it, Repair starts it again with the same store).
//
// existing_stream: the stream is made by the operator (here the test) with
// max_msg_size 16 KiB; Poison makes a payload larger than that, which the
// server rejects. created_stream: searchsync creates the stream; Poison
// makes a payload larger than the server's max_payload (1 MiB).
func TestContract(t *testing.T) {
	t.Run("existing_stream", func(t *testing.T) {
		t.Parallel()
		sinktest.Run(t, harness{create: false})
	})
	t.Run("created_stream", func(t *testing.T) {
		t.Parallel()
		sinktest.Run(t, harness{create: true})
	})
}

type harness struct{ create bool }

type instance struct {
	srv      *natstest.Server
	consumer *nats.Consumer
	stream   string
	create   bool
}

func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("SEARCHSYNC_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func (h harness) Start(t *testing.T) sinktest.Instance {
	srv := natstest.Start(t)
	stream := strings.ToUpper(testenv.Name("contract"))
	subject := testenv.Name("outbox") + ".{aggregate_type}.{event_type}"
	if !h.create {
		createStream(t, srv.URL, jetstream.StreamConfig{
			Name: stream, Subjects: []string{strings.Split(subject, ".")[0] + ".>"},
			Duplicates: 2 * time.Minute, MaxMsgSize: 16 << 10, Storage: jetstream.FileStorage,
		})
	}
	c, err := nats.New(context.Background(), "queue", nats.Config{
		URL: srv.URL, Stream: stream, Subject: subject, CreateStream: h.create, Timeout: 3 * time.Second,
	}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &instance{srv: srv, consumer: c, stream: stream, create: h.create}
}

func (in *instance) Consumer() sink.Consumer { return in.consumer }
func (in *instance) Break(t *testing.T)      { in.srv.Stop() }
func (in *instance) Repair(t *testing.T)     { in.srv.Restart() }

func (in *instance) Received(t *testing.T) []sinktest.Delivery {
	return received(t, in.srv.URL, in.stream)
}

func (in *instance) Poison(t *testing.T, e *outbox.Event) {
	size := 32 << 10 // over the stream's max_msg_size
	if in.create {
		size = 2 << 20 // over the server's max_payload
	}
	e.Payload = json.RawMessage(`{"version":1,"blob":"` + strings.Repeat("x", size) + `"}`)
}

func received(t *testing.T, url, stream string) []sinktest.Delivery {
	t.Helper()
	msgs := natstest.Messages(t, url, stream)
	out := make([]sinktest.Delivery, len(msgs))
	for i, m := range msgs {
		id, err := strconv.ParseInt(m.Header.Get(jetstream.MsgIDHeader), 10, 64)
		if err != nil {
			t.Fatalf("message %d: Nats-Msg-Id %q: %v", m.Sequence, m.Header.Get(jetstream.MsgIDHeader), err)
		}
		out[i].ID = id
		out[i].Partition, out[i].LeaseEpoch = m.Header.Get(sink.HeaderPartition), m.Header.Get(sink.HeaderLeaseEpoch)
		if err := json.Unmarshal(m.Data, &out[i].Message); err != nil {
			t.Fatalf("message %d: body: %v", m.Sequence, err)
		}
	}
	return out
}

func createStream(t *testing.T, url string, sc jetstream.StreamConfig) {
	t.Helper()
	nc, err := natsgo.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, sc); err != nil {
		t.Fatalf("create stream %s: %v", sc.Name, err)
	}
}

func deleteStream(t *testing.T, url, name string) {
	nc, err := natsgo.Connect(url)
	if err != nil {
		t.Logf("delete stream %s: %v", name, err)
		return
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := js.DeleteStream(ctx, name); err != nil {
		t.Logf("delete stream %s: %v", name, err)
	}
}
