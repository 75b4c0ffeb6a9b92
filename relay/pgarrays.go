package relay

import (
	"encoding/binary"

	"github.com/jackc/pgx/v5/pgtype"
)

// The relay's statements take arrays of thousands of ids, partitions,
// attempts and aggregate ids per batch. pgx encodes a slice through its
// generic array codec: each element boxed into an interface and encoded by
// its own plan, about 40 ns and an allocation per element, a tenth of the
// relay's CPU. fastArrays registers, on a connection's type map, codecs
// that write []int64, []int32 and [][16]byte to int8[], int4[] and uuid[]
// in the binary array format directly; every other value goes to pgx's own
// codec. useFastArrays installs them on a connection once, when the relay
// first runs a statement on it.

// fastArray wraps pgx's codec of one array type.
type fastArray struct {
	pgtype.Codec
	elemOID uint32
}

func (c fastArray) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if format == pgtype.BinaryFormatCode {
		switch value.(type) {
		case []int64:
			if c.elemOID == pgtype.Int8OID {
				return intArray[int64]{pgtype.Int8OID}
			}
		case []int32:
			if c.elemOID == pgtype.Int4OID {
				return intArray[int32]{pgtype.Int4OID}
			}
		case [][16]byte:
			if c.elemOID == pgtype.UUIDOID {
				return uuidArray{}
			}
		}
	}
	return c.Codec.PlanEncode(m, oid, format, value)
}

// arrayHeader appends the header of a one-dimensional array of n elements
// without NULLs (an empty one too has its dimension, as pgx writes it).
func arrayHeader(buf []byte, n int, elemOID uint32) []byte {
	buf = binary.BigEndian.AppendUint32(buf, 1) // dimensions
	buf = binary.BigEndian.AppendUint32(buf, 0) // has nulls
	buf = binary.BigEndian.AppendUint32(buf, elemOID)
	buf = binary.BigEndian.AppendUint32(buf, uint32(n)) // length
	return binary.BigEndian.AppendUint32(buf, 1)        // lower bound
}

// intArray writes a []T as an array of the integer type elemOID (int8 for
// int64, int4 for int32).
type intArray[T int32 | int64] struct{ elemOID uint32 }

func (a intArray[T]) Encode(value any, buf []byte) ([]byte, error) {
	v := value.([]T)
	buf = arrayHeader(buf, len(v), a.elemOID)
	var zero T
	size := binary.Size(zero)
	for _, x := range v {
		buf = binary.BigEndian.AppendUint32(buf, uint32(size))
		if size == 8 {
			buf = binary.BigEndian.AppendUint64(buf, uint64(x))
		} else {
			buf = binary.BigEndian.AppendUint32(buf, uint32(x))
		}
	}
	return buf, nil
}

type uuidArray struct{}

func (uuidArray) Encode(value any, buf []byte) ([]byte, error) {
	v := value.([][16]byte)
	buf = arrayHeader(buf, len(v), pgtype.UUIDOID)
	for _, x := range v {
		buf = binary.BigEndian.AppendUint32(buf, 16)
		buf = append(buf, x[:]...)
	}
	return buf, nil
}

// fastArrayTypes are the array types fastArrays takes over: array OID,
// element OID.
var fastArrayTypes = [][2]uint32{
	{pgtype.Int8ArrayOID, pgtype.Int8OID},
	{pgtype.Int4ArrayOID, pgtype.Int4OID},
	{pgtype.UUIDArrayOID, pgtype.UUIDOID},
}

// useFastArrays installs fastArray on m unless it is there already.
func useFastArrays(m *pgtype.Map) {
	for _, t := range fastArrayTypes {
		dt, ok := m.TypeForOID(t[0])
		if !ok {
			continue
		}
		if _, done := dt.Codec.(fastArray); done {
			continue
		}
		m.RegisterType(&pgtype.Type{Name: dt.Name, OID: dt.OID, Codec: fastArray{Codec: dt.Codec, elemOID: t[1]}})
	}
}
