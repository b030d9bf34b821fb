package bytesize

import "testing"

func TestFormat(t *testing.T) {
	for _, tt := range []struct {
		n              int64
		format, approx string
	}{
		{1 << 30, "1 GiB", "1.0 GiB"},
		{64 << 10, "64 KiB", "64.0 KiB"},
		{1500, "1500 bytes", "1.5 KiB"},
		{812, "812 bytes", "812 bytes"},
		{3<<29 + 1, "1610612737 bytes", "1.5 GiB"},
		{0, "0 bytes", "0 bytes"},
	} {
		if got := Format(tt.n); got != tt.format {
			t.Errorf("Format(%d) = %q, want %q", tt.n, got, tt.format)
		}
		if got := Approx(tt.n); got != tt.approx {
			t.Errorf("Approx(%d) = %q, want %q", tt.n, got, tt.approx)
		}
	}
	if p := Percent(3, 4); p != 75 {
		t.Errorf("Percent(3, 4) = %d, want 75", p)
	}
}
