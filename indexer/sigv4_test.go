package indexer_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/testenv"
)

// verifySigV4 checks a request's AWS Signature Version 4 from the
// specification (canonical request, string to sign, derived key), written
// here independently of the AWS SDK's signer. It returns the service of the
// credential scope.
func verifySigV4(r *http.Request, body []byte, secretKey string) (string, error) {
	auth := r.Header.Get("Authorization")
	rest, ok := strings.CutPrefix(auth, "AWS4-HMAC-SHA256 ")
	if !ok {
		return "", fmt.Errorf("no AWS4-HMAC-SHA256 Authorization header: %.20q", auth)
	}
	fields := map[string]string{}
	for _, f := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(f), "=")
		fields[k] = v
	}
	scope := strings.SplitN(fields["Credential"], "/", 2)
	if len(scope) != 2 {
		return "", fmt.Errorf("bad Credential")
	}
	parts := strings.Split(scope[1], "/") // date/region/service/aws4_request
	if len(parts) != 4 || parts[3] != "aws4_request" {
		return "", fmt.Errorf("bad credential scope %q", scope[1])
	}
	amzDate := r.Header.Get("X-Amz-Date")
	if !strings.HasPrefix(amzDate, parts[0]) {
		return "", fmt.Errorf("X-Amz-Date %q outside the scope's date %s", amzDate, parts[0])
	}
	sum := sha256.Sum256(body)
	payload := hex.EncodeToString(sum[:])
	if h := r.Header.Get("X-Amz-Content-Sha256"); h != "" && h != payload {
		return "", fmt.Errorf("X-Amz-Content-Sha256 is not the body's hash")
	}
	signed := strings.Split(fields["SignedHeaders"], ";")
	var ch strings.Builder
	for _, h := range signed {
		var v string
		if h == "host" {
			v = r.Host
		} else {
			vals := r.Header.Values(h)
			for i := range vals {
				vals[i] = strings.Join(strings.Fields(vals[i]), " ")
			}
			v = strings.Join(vals, ",")
		}
		ch.WriteString(h + ":" + v + "\n")
	}
	canonical := strings.Join([]string{
		r.Method,
		canonicalURI(r.URL.Path),
		canonicalQuery(r.URL.Query()),
		ch.String(),
		fields["SignedHeaders"],
		payload,
	}, "\n")
	crSum := sha256.Sum256([]byte(canonical))
	toSign := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + scope[1] + "\n" + hex.EncodeToString(crSum[:])
	key := []byte("AWS4" + secretKey)
	for _, p := range parts {
		key = hmacSHA256(key, p)
	}
	want := hex.EncodeToString(hmacSHA256(key, toSign))
	if !hmac.Equal([]byte(want), []byte(fields["Signature"])) {
		return "", fmt.Errorf("signature mismatch")
	}
	return parts[2], nil
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

// rfc3986 escapes everything but the unreserved characters.
func rfc3986(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// canonicalURI escapes each segment twice, as SigV4 wants for every service
// but S3 (the paths searchsync sends have no characters that differ).
func canonicalURI(p string) string {
	if p == "" {
		return "/"
	}
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = rfc3986(rfc3986(s))
	}
	return strings.Join(segs, "/")
}

func canonicalQuery(q url.Values) string {
	var pairs []string
	for k, vs := range q {
		for _, v := range vs {
			pairs = append(pairs, rfc3986(k)+"="+rfc3986(v))
		}
	}
	sort.Strings(pairs)
	return strings.Join(pairs, "&")
}

// TestSigV4VerifierMatchesAWSVectors proves the verifier against AWS's
// published SigV4 test suite (get-vanilla and post-vanilla), so that it can
// judge the signer.
func TestSigV4VerifierMatchesAWSVectors(t *testing.T) {
	t.Parallel()
	const secretKey = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
	for method, sig := range map[string]string{
		http.MethodGet:  "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
		http.MethodPost: "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b",
	} {
		r := httptest.NewRequest(method, "https://example.amazonaws.com/", nil)
		r.Host = "example.amazonaws.com"
		r.Header.Set("X-Amz-Date", "20150830T123600Z")
		auth := "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature="
		r.Header.Set("Authorization", auth+sig)
		if svc, err := verifySigV4(r, nil, secretKey); err != nil || svc != "service" {
			t.Errorf("%s vector: %s, %v", method, svc, err)
		}
		r.Header.Set("Authorization", auth+strings.Repeat("0", 64))
		if _, err := verifySigV4(r, nil, secretKey); err == nil {
			t.Errorf("%s: a wrong signature passed", method)
		}
		if _, err := verifySigV4(r, []byte("x"), secretKey); err == nil {
			t.Errorf("%s: a changed body passed", method)
		}
	}
}

// sigV4Gate is a reverse proxy to the URL to (the real OpenSearch node, or a proxy
// in front of it) that lets a request through only when verifySigV4 accepts
// it with secretKey, and answers 403 otherwise, as Amazon OpenSearch Service
// does. The signature stays on the request it forwards.
func sigV4Gate(t *testing.T, to, secretKey string) (string, *atomic.Int64, *atomic.Value) {
	target, _ := url.Parse(to)
	rp := httputil.NewSingleHostReverseProxy(target)
	var verified atomic.Int64
	var service atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		svc, err := verifySigV4(r, body, secretKey)
		if err != nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			json.NewEncoder(w).Encode(map[string]any{"message": "The request signature we calculated does not match the signature you provided: " + err.Error()})
			return
		}
		verified.Add(1)
		service.Store(svc)
		r.Body = io.NopCloser(bytes.NewReader(body))
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &verified, &service
}

// awsProfile points the AWS SDK at a credentials file of its own with one
// profile, and away from the machine's configuration and instance metadata.
func awsProfile(t *testing.T, profile, keyID, secretKey string) {
	dir := t.TempDir()
	creds := filepath.Join(dir, "credentials")
	if err := os.WriteFile(creds, []byte(fmt.Sprintf("[%s]\naws_access_key_id = %s\naws_secret_access_key = %s\n", profile, keyID, secretKey)), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", creds)
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	for _, v := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION"} {
		t.Setenv(v, "")
	}
}

// TestSigV4 sends the adapter's requests (index creation, bulk, mget,
// search) through the gate to the real engine: every one must carry a
// signature the independent verifier accepts, for service es and aoss; a
// wrong secret is refused with a message that names the AWS settings.
func TestSigV4(t *testing.T) {
	const secretKey = "sigv4-test-secret/K7MDENG+bPxRfiCY"
	awsProfile(t, "searchsync-test", "AKIDSEARCHSYNCTEST", secretKey)
	gate, verified, service := sigV4Gate(t, testenv.EngineURL(t), secretKey)
	ctx := context.Background()

	for _, svc := range []string{"es", "aoss"} {
		eng, err := indexer.New(indexer.Config{Kind: "opensearch", URLs: []string{gate},
			AWS: &indexer.AWSConfig{Region: "eu-west-1", Service: svc, Profile: "searchsync-test"}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		index := testenv.Name("sigv4")
		before := verified.Load()
		if err := eng.CreateIndex(ctx, index, json.RawMessage(`{"settings":{"number_of_shards":1,"number_of_replicas":0},"aliases":{"`+index+`_a":{}}}`)); err != nil {
			t.Fatalf("%s: create index through SigV4: %v", svc, err)
		}
		t.Cleanup(func() { eng.DeleteIndex(context.Background(), index) })
		res, err := eng.Bulk(ctx, []indexer.BulkOp{{Type: indexer.OpIndex, Index: index, ID: "1", Version: 1, Doc: json.RawMessage(`{"name":"Ada"}`)}})
		if err != nil || res[0].Status != http.StatusCreated {
			t.Fatalf("%s: bulk through SigV4: %v %+v", svc, err, res)
		}
		docs, err := eng.MGet(ctx, index, []string{"1"})
		if err != nil || len(docs) != 1 {
			t.Fatalf("%s: mget through SigV4: %v %v", svc, err, docs)
		}
		if err := indexer.CheckAccess(ctx, eng, index+"_a"); err != nil {
			t.Fatalf("%s: access check through SigV4: %v", svc, err)
		}
		if n := verified.Load() - before; n < 4 {
			t.Errorf("%s: only %d verified requests", svc, n)
		}
		if got := service.Load(); got != svc {
			t.Errorf("signed for service %v, want %s", got, svc)
		}
		indexer.Close(eng)
	}

	// The same key id with another secret: the gate refuses every request.
	awsProfile(t, "searchsync-test", "AKIDSEARCHSYNCTEST", "not-the-secret")
	eng, err := indexer.New(indexer.Config{Kind: "opensearch", URLs: []string{gate},
		AWS: &indexer.AWSConfig{Region: "eu-west-1", Profile: "searchsync-test"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer indexer.Close(eng)
	err = eng.Ping(ctx)
	if err == nil || !strings.Contains(err.Error(), "check engine.aws.region, engine.aws.service") {
		t.Fatalf("a wrong secret: %v", err)
	}
	if _, err := eng.Count(ctx, "x", nil); err == nil || !strings.Contains(err.Error(), "signature mismatch") {
		t.Fatalf("a wrong secret on count: %v", err)
	}

	// No credentials at all: a ConfigError naming engine.aws, not a retry.
	awsProfile(t, "other", "AKIDX", "y")
	eng2, err := indexer.New(indexer.Config{Kind: "opensearch", URLs: []string{gate},
		AWS: &indexer.AWSConfig{Region: "eu-west-1", Profile: "searchsync-test"}}, nil)
	if err == nil {
		err = eng2.Ping(ctx)
		indexer.Close(eng2)
	}
	if err == nil || !strings.Contains(err.Error(), "engine.aws") || indexer.IsTemporary(err) {
		t.Fatalf("a missing profile: %v (temporary %v)", err, indexer.IsTemporary(err))
	}
	// No region anywhere.
	awsProfile(t, "searchsync-test", "AKIDSEARCHSYNCTEST", secretKey)
	_, err = indexer.New(indexer.Config{Kind: "opensearch", URLs: []string{gate}, AWS: &indexer.AWSConfig{Profile: "searchsync-test"}}, nil)
	if err == nil || !strings.Contains(err.Error(), "engine.aws.region") {
		t.Fatalf("no region: %v", err)
	}
}
