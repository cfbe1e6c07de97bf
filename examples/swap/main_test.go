package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestSwapOnMemory(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-url", "mem://swap-test", "-workers", "3", "-rounds", "4"}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "ok: 12 critical sections") {
		t.Fatalf("unexpected output:\n%s", out.String())
	}
}

func TestSwapBadURL(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"-url", "nope://x"}, &out)
	if err == nil || !strings.Contains(err.Error(), "mem") {
		t.Fatalf("want an error naming the known schemes, got %v", err)
	}
}
