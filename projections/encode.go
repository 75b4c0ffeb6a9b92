package projections

// Encode is json.Marshal of a document, byte for byte (keys sorted, HTML
// characters, U+2028 and U+2029 escaped, invalid UTF-8 as U+FFFD, a
// json.Number checked; TestEncodeValuesLikeEncodingJSON), through sonic's
// encoder: about three times as fast as encoding/json on these maps.
func Encode(doc map[string]any) ([]byte, error) { return encoder.Marshal(doc) }
