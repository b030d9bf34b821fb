package kstatus

import "testing"

func TestWarning(t *testing.T) {
	tests := map[string]string{
		"user bob is locked: incident 42": `299 - "user bob is locked: incident 42"`,
		`say "hi" \ bye`:                  `299 - "say 'hi' ' bye"`,
		"line\r\nInjected: header":        `299 - "line  Injected: header"`,
		"ünïcode":                         `299 - " n code"`,
	}
	for in, want := range tests {
		if got := Warning(in); got != want {
			t.Errorf("Warning(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRefusal(t *testing.T) {
	h, body := Refusal(403, `user bob is locked: "incident"`)
	if h.Get("Content-Type") != "application/json" || h.Get("Warning") != `299 - "user bob is locked: 'incident'"` {
		t.Fatalf("headers %v", h)
	}
	want := `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"user bob is locked: \"incident\"","reason":"Forbidden","code":403}` + "\n"
	if string(body) != want {
		t.Fatalf("body %s, want %s", body, want)
	}
}
