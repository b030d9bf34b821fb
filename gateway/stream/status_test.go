package stream

import (
	"strings"
	"testing"
)

func TestParseStatus(t *testing.T) {
	tests := []struct {
		in      string
		want    ExitStatus
		wantErr string
	}{
		{`{"metadata":{},"status":"Success"}`, ExitStatus{Code: 0}, ""},
		{`{"status":"Failure","reason":"NonZeroExitCode","message":"m","details":{"causes":[{"reason":"ExitCode","message":"127"}]}}`,
			ExitStatus{Code: 127, Reason: "NonZeroExitCode", Message: "m"}, ""},
		{`{"status":"Failure","reason":"InternalError","message":"boom","code":500}`,
			ExitStatus{Code: 1, Reason: "InternalError", Message: "boom"}, ""},
		{`{"status":"Failure","reason":"NonZeroExitCode"}`, ExitStatus{Code: 1, Reason: "NonZeroExitCode"}, ""},
		{`{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"Other","message":"x"},{"reason":"ExitCode","message":"2"}]}}`,
			ExitStatus{Code: 2, Reason: "NonZeroExitCode"}, ""},
		{`{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"256"}]}}`, ExitStatus{}, "0..255"},
		{`{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"x"}]}}`, ExitStatus{}, "0..255"},
		{`{"status":"Pending"}`, ExitStatus{}, "unknown status"},
		{`{}`, ExitStatus{}, "unknown status"},
		{`[1]`, ExitStatus{}, "parse status"},
	}
	for _, tc := range tests {
		got, err := ParseStatus([]byte(tc.in))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseStatus(%s) error %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseStatus(%s) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestJSONObjects(t *testing.T) {
	var got []string
	collect := func(obj []byte) error { got = append(got, string(obj)); return nil }
	s := JSONObjects{Max: 64}
	for _, chunk := range []string{` {"a":`, `1}{"b"`, `:"}{"} `, "\n", `{"c":[1,2]}`} {
		if err := s.Feed([]byte(chunk), collect); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{`{"a":1}`, `{"b":"}{"}`, `{"c":[1,2]}`}
	if strings.Join(got, "|") != strings.Join(want, "|") || s.Pending() {
		t.Errorf("got %q (pending %v), want %q", got, s.Pending(), want)
	}
	for _, bad := range []string{`7`, `"str"`, `{"a" 1}`, `{` + strings.Repeat(" ", 64)} {
		s := JSONObjects{Max: 64}
		if err := s.Feed([]byte(bad), collect); err == nil {
			t.Errorf("Feed(%q) accepted", bad)
		}
	}
}
