package relay

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/searchsync/searchsync/internal/testenv"
)

// The relay's array encoders write what pgx's own codec writes, byte for
// byte, for empty, short and long arrays and the extreme values.
func TestFastArraysEncodeAsPgxDoes(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	fast, std := pgtype.NewMap(), pgtype.NewMap()
	useFastArrays(fast)
	useFastArrays(fast) // a second time changes nothing
	if dt, _ := fast.TypeForOID(pgtype.Int8ArrayOID); dt.Codec.(fastArray).Codec == nil {
		t.Fatal("int8[] is not encoded by fastArray")
	} else if _, twice := dt.Codec.(fastArray).Codec.(fastArray); twice {
		t.Fatal("fastArray wraps itself")
	}
	for _, n := range []int{0, 1, 2, 1000} {
		i64 := make([]int64, n)
		i32 := make([]int32, n)
		ids := make([][16]byte, n)
		for k := range n {
			i64[k], i32[k] = r.Int64()-math.MaxInt64/2, r.Int32()-math.MaxInt32/2
			for b := range ids[k] {
				ids[k][b] = byte(r.IntN(256))
			}
		}
		if n > 1 {
			i64[0], i64[1], i32[0], i32[1] = math.MinInt64, math.MaxInt64, math.MinInt32, math.MaxInt32
		}
		for _, c := range []struct {
			oid   uint32
			value any
		}{{pgtype.Int8ArrayOID, i64}, {pgtype.Int4ArrayOID, i32}, {pgtype.UUIDArrayOID, ids}} {
			want, err := std.Encode(c.oid, pgtype.BinaryFormatCode, c.value, []byte("prefix"))
			if err != nil {
				t.Fatal(err)
			}
			got, err := fast.Encode(c.oid, pgtype.BinaryFormatCode, c.value, []byte("prefix"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("oid %d, %d elements: fastArray wrote\n%x\npgx writes\n%x", c.oid, n, got, want)
			}
		}
	}
}

// Through a real connection: the arrays arrive as sent, and the values
// fastArray does not take (text format, other Go types, NULLs) still go
// through pgx's codec.
func TestFastArraysRoundTrip(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	useFastArrays(conn.Conn().TypeMap())
	ids := make([]int64, 3000)
	parts := make([]int32, 3000)
	aggs := make([][16]byte, 3000)
	for i := range ids {
		ids[i], parts[i] = int64(i)*1_000_003-1, int32(i%32)-5
		aggs[i][0], aggs[i][15] = byte(i), byte(i>>8)
	}
	var gotIDs, gotParts []int64
	var gotAggs []pgtype.UUID
	var n int
	if err := conn.QueryRow(ctx, `SELECT $1::bigint[], $2::int[]::bigint[], $3::uuid[], cardinality($4::bigint[]) + cardinality($5::int[])`,
		ids, parts, aggs, []int64{}, []int32{}).Scan(&gotIDs, &gotParts, &gotAggs, &n); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(gotIDs, ids) || n != 0 || len(gotParts) != len(parts) || len(gotAggs) != len(aggs) {
		t.Fatalf("arrays came back as %d ids (equal: %v), %d parts, %d aggregate ids, empty ones %d long",
			len(gotIDs), slices.Equal(gotIDs, ids), len(gotParts), len(gotAggs), n)
	}
	for i := range parts {
		if gotParts[i] != int64(parts[i]) || gotAggs[i].Bytes != aggs[i] {
			t.Fatalf("element %d: %d, %x; sent %d, %x", i, gotParts[i], gotAggs[i].Bytes, parts[i], aggs[i])
		}
	}
	// Other values: a slice of pointers with a NULL, []int for int8[], a
	// text-format array literal.
	one := int64(1)
	var nulls, plain []*int64
	var fromText []int64
	if err := conn.QueryRow(ctx, `SELECT $1::bigint[], $2::bigint[], '{4,5}'::bigint[]`, []*int64{&one, nil}, []int{2, 3}).Scan(&nulls, &plain, &fromText); err != nil {
		t.Fatal(err)
	}
	if len(nulls) != 2 || *nulls[0] != 1 || nulls[1] != nil || len(plain) != 2 || *plain[1] != 3 || !slices.Equal(fromText, []int64{4, 5}) {
		t.Fatalf("other arrays: %v %v %v", nulls, plain, fromText)
	}
}
