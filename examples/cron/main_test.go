package main

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
)

func TestCronOnMemory(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"-url", "mem://cron-test", "-replicas", "4", "-ticks", "5", "-every", "200ms"}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	// Check the printed runs independently of run's own verification.
	runs := regexp.MustCompile(`(?m)^slot (\d+) \(.*\): replica (\d+) runs the job with token (\d+)$`).FindAllStringSubmatch(out.String(), -1)
	perSlot := map[string]int{}
	for _, m := range runs {
		perSlot[m[1]]++
	}
	for i := range 5 {
		if n := perSlot[fmt.Sprint(i)]; n != 1 {
			t.Errorf("slot %d ran %d times", i, n)
		}
	}
	if len(runs) != 5 {
		t.Errorf("%d runs printed, want 5", len(runs))
	}
	if !strings.Contains(out.String(), "ok: 5 slots, each ran exactly once") {
		t.Errorf("no success line")
	}
	if t.Failed() {
		t.Logf("output:\n%s", out.String())
	}
}

func TestCronBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-replicas", "0"},
		{"-every", "1ms"},
		{"-every", "100ms", "-job", "80ms"},
		{"-url", "nope://x"},
	} {
		var out bytes.Buffer
		if err := run(context.Background(), args, &out); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
