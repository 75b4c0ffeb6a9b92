package nats

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/sink/nats/natstest"
	"github.com/searchsync/searchsync/sink/sinktest"
)

// BenchmarkPublish measures the consumer against bare JetStream publish
// loops of the same messages, in the same run, on the same server (each
// into a stream of its own, file storage, de-duplication on):
//
//   - consumer: Deliver of relay-sized batches (500 events over 300
//     aggregates, so about two events per aggregate per batch);
//   - bare_sync: for each message PublishMsg, which waits for its PubAck;
//   - bare_async: PublishMsgAsync of the whole batch, then every PubAck;
//   - bare_async_encoding: the same, building each message (JSON body,
//     headers) inside the timed loop as the consumer does, so that
//     consumer/bare_async_encoding is the cost of order per aggregate and
//     outcome bookkeeping alone.
//
// The bare loops get the messages pre-built, except bare_async_encoding.
// Each iteration is one batch through all four. Reported: events/s of each
// and the consumer divided by each.
//
//	go test ./sink/nats -run '^$' -bench Publish -benchtime 40x
func BenchmarkPublish(b *testing.B) {
	url := natstest.URL(b)
	ctx := context.Background()
	const batchSize, aggregates = 500, 300

	names := func() (stream, prefix string) {
		return strings.ToUpper(testenv.Name("bench")), testenv.Name("bench")
	}
	stream, prefix := names()
	c, err := New(ctx, "bench", Config{URL: url, Stream: stream, Subject: prefix + ".{aggregate_type}.{event_type}", CreateStream: true}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()

	nc, err := natsgo.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4000))
	bare := func() (string, string) {
		s, p := names()
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: s, Subjects: []string{p + ".>"}, Duplicates: 2 * time.Minute, Storage: jetstream.FileStorage}); err != nil {
			b.Fatal(err)
		}
		return s, p
	}
	syncStream, syncPrefix := bare()
	asyncStream, asyncPrefix := bare()
	encStream, encPrefix := bare()
	defer func() {
		for _, s := range []string{stream, syncStream, asyncStream, encStream} {
			js.DeleteStream(ctx, s)
		}
	}()

	var g sinktest.Events
	keys := make([]string, batchSize)
	var tConsumer, tSync, tAsync, tEnc time.Duration
	b.ResetTimer()
	for i := range b.N {
		for j := range keys {
			keys[j] = "agg" + strconv.Itoa((i*batchSize+j)%aggregates)
		}
		events := g.Make(keys...)

		start := time.Now()
		for k, o := range c.Deliver(ctx, events) {
			if !o.Kind.Delivered() {
				b.Fatalf("event %d: %s %s", events[k].ID, o.Kind, o.Reason)
			}
		}
		tConsumer += time.Since(start)

		msgs := messages(b, c, events, prefix, syncPrefix, syncStream)
		start = time.Now()
		for _, m := range msgs {
			if _, err := js.PublishMsg(ctx, m); err != nil {
				b.Fatal(err)
			}
		}
		tSync += time.Since(start)

		msgs = messages(b, c, events, prefix, asyncPrefix, asyncStream)
		start = time.Now()
		futures := make([]jetstream.PubAckFuture, len(msgs))
		for k, m := range msgs {
			if futures[k], err = js.PublishMsgAsync(m); err != nil {
				b.Fatal(err)
			}
		}
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				b.Fatal(err)
			}
		}
		tAsync += time.Since(start)

		start = time.Now()
		for k, e := range events {
			m, err := c.message(e)
			if err != nil {
				b.Fatal(err)
			}
			m.Subject = encPrefix + strings.TrimPrefix(m.Subject, prefix)
			m.Header[jetstream.ExpectedStreamHeader] = []string{encStream}
			if futures[k], err = js.PublishMsgAsync(m); err != nil {
				b.Fatal(err)
			}
		}
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				b.Fatal(err)
			}
		}
		tEnc += time.Since(start)
	}
	b.StopTimer()
	n := float64(b.N * batchSize)
	rate := func(d time.Duration) float64 { return n / d.Seconds() }
	b.ReportMetric(rate(tConsumer), "consumer_events/s")
	b.ReportMetric(rate(tSync), "bare_sync_events/s")
	b.ReportMetric(rate(tAsync), "bare_async_events/s")
	b.ReportMetric(rate(tConsumer)/rate(tSync), "consumer/bare_sync")
	b.ReportMetric(rate(tEnc), "bare_async_encoding_events/s")
	b.ReportMetric(rate(tConsumer)/rate(tAsync), "consumer/bare_async")
	b.ReportMetric(rate(tConsumer)/rate(tEnc), "consumer/bare_async_encoding")
}

// messages are the consumer's messages of the events, moved to another
// subject prefix and stream.
func messages(b *testing.B, c *Consumer, events []*outbox.Event, from, to, stream string) []*natsgo.Msg {
	out := make([]*natsgo.Msg, len(events))
	for i, e := range events {
		m, err := c.message(e)
		if err != nil {
			b.Fatal(err)
		}
		m.Subject = to + strings.TrimPrefix(m.Subject, from)
		m.Header[jetstream.ExpectedStreamHeader] = []string{stream}
		out[i] = m
	}
	return out
}
