package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/distlock/distlock/examples/internal/backendtest"
)

// TestCron runs the program on every backend, on real servers.
func TestCron(t *testing.T) {
	backendtest.Each(t, nil, func(t *testing.T, url string) {
		var out, errOut bytes.Buffer
		// Slots of 1s: a slot whose start window (3/4 of it) passes before
		// any replica got the lock is skipped by design, and a first
		// acquire on a loaded CI machine (ZooKeeper's parent znodes) can
		// take a few hundred ms.
		err := run(t.Context(), []string{"-url", url, "-replicas", "3", "-ticks", "3", "-every", "1s"}, &out, &errOut)
		if err != nil {
			t.Fatalf("%v\n%s%s", err, out.String(), errOut.String())
		}
		// Check the printed runs independently of run's own verification.
		runs := regexp.MustCompile(`(?m)^slot (\d+) \(.*\): replica (\d+) runs the job with token (\d+)$`).FindAllStringSubmatch(out.String(), -1)
		perSlot := map[string]int{}
		for _, m := range runs {
			perSlot[m[1]]++
		}
		for i := range 3 {
			if n := perSlot[fmt.Sprint(i)]; n != 1 {
				t.Errorf("slot %d ran %d times", i, n)
			}
		}
		if len(runs) != 3 {
			t.Errorf("%d runs printed, want 3", len(runs))
		}
		if !strings.Contains(out.String(), "backend: "+url+" (") || !strings.Contains(out.String(), "ok: 3 slots, each ran exactly once") {
			t.Errorf("no backend or success line")
		}
		if t.Failed() {
			t.Logf("output:\n%s", out.String())
		}
	})
}

func TestCronBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-replicas", "0"},
		{"-every", "1ms"},
		{"-every", "100ms", "-job", "80ms"},
		{"-url", "nope://x"},
		{"-nope"},
		{"extra"},
	} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), args, &out, &errOut); err == nil || errors.Is(err, flag.ErrHelp) {
			t.Errorf("%v: error %v", args, err)
		}
	}
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"-h"}, &out, &errOut)
	if !errors.Is(err, flag.ErrHelp) || !strings.Contains(errOut.String(), "$DISTLOCK_URL, else mem://") || strings.Contains(errOut.String(), `(default "`) {
		t.Fatalf("-h: %v\n%s", err, errOut.String())
	}
}
