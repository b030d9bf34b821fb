package apihttp

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
)

// request is the shape the decoder tests read into.
type request struct {
	Name  string            `json:"name"`
	Count int               `json:"count,omitempty"`
	Tags  map[string]string `json:"tags,omitempty"`
}

func TestDecodeHostileBodies(t *testing.T) {
	const ctJSON = "application/json"
	pad := func(n int) string { return strings.Repeat(" ", n) }
	big := `{"name":"` + strings.Repeat("a", MaxBody) + `"}`
	exact := `{"name":"` + strings.Repeat("a", MaxBody-len(`{"name":""}`)) + `"}`
	tests := []struct {
		name, ctype, body string
		want              int // 0: accepted
		say               string
	}{
		{"valid", ctJSON, `{"name":"alice","count":2}`, 0, ""},
		{"valid with charset", "application/json; charset=utf-8", `{"name":"alice"}`, 0, ""},
		{"trailing white space", ctJSON, `{"name":"alice"}` + " \n\t", 0, ""},
		{"exactly the limit", ctJSON, exact, 0, ""},

		{"oversized value", ctJSON, big, 413, "over 65536 bytes"},
		{"valid value padded past the limit", ctJSON, `{"name":"alice"}` + pad(MaxBody), 413, "over"},
		{"empty", ctJSON, ``, 400, "empty"},
		{"only white space", ctJSON, "  \n", 400, "empty"},
		{"malformed", ctJSON, `{"name":`, 400, "unexpected EOF"},
		{"not JSON", ctJSON, `name=alice`, 400, "invalid character"},
		{"wrong type", ctJSON, `{"name":7}`, 400, "cannot unmarshal"},
		{"array", ctJSON, `[]`, 400, "cannot unmarshal"},
		{"unknown field", ctJSON, `{"name":"alice","admin":true}`, 400, `unknown field "admin"`},
		{"field name in another case", ctJSON, `{"Name":"alice"}`, 0, ""}, // encoding/json matches names case-insensitively
		{"second value", ctJSON, `{"name":"alice"}{"name":"bob"}`, 400, "more than one JSON value"},
		{"stray closing brace", ctJSON, `{"name":"alice"}}`, 400, "more than one JSON value"},
		{"stray closing bracket", ctJSON, `{"name":"alice"}]`, 400, "more than one JSON value"},
		{"trailing garbage", ctJSON, `{"name":"alice"} x`, 400, "more than one JSON value"},
		{"trailing number", ctJSON, `{"name":"alice"} 1`, 400, "more than one JSON value"},
		{"deep nesting", ctJSON, strings.Repeat("[", 20000), 400, "exceeded max depth"},
		{"invalid UTF-8 is replaced, not refused", ctJSON, "{\"name\":\"\xff\"}", 0, ""},

		{"no content type", "", `{"name":"alice"}`, 415, "send application/json"},
		{"text/plain", "text/plain", `{"name":"alice"}`, 415, "send application/json"},
		{"form", "application/x-www-form-urlencoded", `name=alice`, 415, "send application/json"},
		{"json suffix type", "application/merge-patch+json", `{"name":"alice"}`, 415, ""},
		{"malformed content type", "application/json; =", `{"name":"alice"}`, 415, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/v1/x", strings.NewReader(tt.body))
			if tt.ctype != "" {
				r.Header.Set("Content-Type", tt.ctype)
			}
			w := httptest.NewRecorder()
			var v request
			ok := Decode(w, r, &v)
			if tt.want == 0 {
				if !ok {
					t.Fatalf("refused: %d %s", w.Code, w.Body)
				}
				return
			}
			if ok || w.Code != tt.want {
				t.Fatalf("Decode = %v, %d %s; want %d", ok, w.Code, w.Body, tt.want)
			}
			var e ErrorResponse
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || !strings.Contains(e.Error, tt.say) {
				t.Fatalf("answer %s (%v), want an error saying %q", w.Body, err, tt.say)
			}
			if ct := w.Header().Get("Content-Type"); ct != "application/json" {
				t.Fatalf("error answer Content-Type %q", ct)
			}
		})
	}
}

// A body that arrives a byte at a time, or fails mid-way, is handled like
// any other.
func TestDecodeJSONReaders(t *testing.T) {
	var v request
	if err := DecodeJSON(iotest.OneByteReader(strings.NewReader(`{"name":"alice"}  `)), &v); err != nil || v.Name != "alice" {
		t.Fatalf("one byte at a time: %+v, %v", v, err)
	}
	pad := strings.NewReader(`{"name":"alice"}` + strings.Repeat(" ", MaxBody))
	var be *BodyError
	if err := DecodeJSON(iotest.OneByteReader(pad), &v); !errors.As(err, &be) || be.Status != 413 {
		t.Fatalf("padded past the limit, one byte at a time: %v", err)
	}
	broken := errors.New("connection reset")
	err := DecodeJSON(iotest.ErrReader(broken), &v)
	if !errors.As(err, &be) || be.Status != 400 || !errors.Is(err, broken) {
		t.Fatalf("failing reader: %v", err)
	}
}

// FuzzDecodeJSON: whatever the body, DecodeJSON never panics, accepts only
// a body that is one valid JSON value within MaxBody, answers every refusal
// with 400 or 413, and what it accepts survives a round trip.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{
		`{"name":"alice","count":2,"tags":{"a":"b"}}`, `{}`, ` {"name":"x"} `, `{"name":"alice"}}`, `{"name":"alice"}]`,
		`{"a":1}`, `{"name":"a"}{"name":"b"}`, `[`, `null`, `"x"`, `{"tags":{"":""}}`, "{\"name\":\"\xff\"}", `{"count":1e400}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var v request
		err := DecodeJSON(strings.NewReader(string(body)), &v)
		if err != nil {
			var be *BodyError
			if !errors.As(err, &be) || (be.Status != 400 && be.Status != 413) {
				t.Fatalf("refusal %v is not a 400 or 413 BodyError", err)
			}
			return
		}
		if len(body) > MaxBody {
			t.Fatalf("accepted a %d-byte body", len(body))
		}
		if !json.Valid(body) {
			t.Fatalf("accepted %q, which is not exactly one JSON value", body)
		}
		again, _ := json.Marshal(v)
		var w request
		if err := DecodeJSON(strings.NewReader(string(again)), &w); err != nil {
			t.Fatalf("re-encoded %s refused: %v", again, err)
		}
	})
}
