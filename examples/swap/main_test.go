package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/distlock/distlock/examples/internal/backendtest"
)

// TestSwap runs the program on every backend, on real servers.
func TestSwap(t *testing.T) {
	backendtest.Each(t, nil, func(t *testing.T, url string) {
		var out, errOut bytes.Buffer
		if err := run(t.Context(), []string{"-url", url, "-workers", "3", "-rounds", "4"}, &out, &errOut); err != nil {
			t.Fatalf("%v\n%s%s", err, out.String(), errOut.String())
		}
		if !strings.Contains(out.String(), "backend: "+url+"\n") || !strings.Contains(out.String(), "ok: 12 critical sections") {
			t.Fatalf("unexpected output:\n%s", out.String())
		}
	})
}

func TestSwapURLFromEnvironment(t *testing.T) {
	t.Setenv("DISTLOCK_URL", "mem://swap-env")
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"-workers", "2", "-rounds", "1"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "backend: mem://swap-env\n") {
		t.Fatalf("DISTLOCK_URL not used:\n%s", out.String())
	}
}

func TestSwapUsage(t *testing.T) {
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"-h"}, &out, &errOut)
	if !errors.Is(err, flag.ErrHelp) || !strings.Contains(errOut.String(), "$DISTLOCK_URL, else mem://") {
		t.Fatalf("-h: %v\n%s", err, errOut.String())
	}
	if strings.Count(errOut.String(), "default") != 2 { // -workers, -rounds
		t.Errorf("-h: want the two numeric defaults only:\n%s", errOut.String())
	}
	if err := run(context.Background(), []string{"-nope"}, &out, &errOut); !errors.Is(err, errUsage) {
		t.Errorf("-nope: %v, want errUsage", err)
	}
	err = run(context.Background(), []string{"-url", "nope://x"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "etcd") {
		t.Fatalf("want an error naming the known schemes, etcd among them, got %v", err)
	}
}
