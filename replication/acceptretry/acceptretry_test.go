package acceptretry

import (
	"errors"
	"syscall"
	"testing"
	"time"
)

func TestRetry(t *testing.T) {
	var b Backoff
	if b.Retry(errors.New("listener closed"), nil) {
		t.Fatal("a permanent error retried")
	}
	want := []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond}
	for i, w := range want {
		if !b.Retry(syscall.EMFILE, nil) {
			t.Fatalf("retry %d of EMFILE refused", i)
		}
		if b.Delay() != w {
			t.Fatalf("retry %d waited %v, want %v", i, b.Delay(), w)
		}
	}
	b.Reset()
	if b.Delay() != 0 {
		t.Fatal("reset kept the delay")
	}
	// A server closing: the wait ends at once and the loop stops.
	b.d = time.Second / 2
	done := make(chan struct{})
	close(done)
	if b.Retry(syscall.EMFILE, done) {
		t.Fatal("retry after done reported true")
	}
}

func TestRetryCapped(t *testing.T) {
	b := Backoff{d: 800 * time.Millisecond}
	done := make(chan struct{})
	close(done)
	b.Retry(syscall.ENFILE, done)
	if b.Delay() != time.Second {
		t.Fatalf("delay %v after 800ms, want the cap of 1s", b.Delay())
	}
}
