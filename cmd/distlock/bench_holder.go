package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// selfExe is the program crash runs as its holder ("distlock hold"); tests
// point it at a built binary.
var selfExe = os.Executable

// startHolder runs "distlock hold" on key and waits until it holds the
// lock; kill SIGKILLs it (idempotent) and reaps it.
func startHolder(ctx context.Context, rawURL, key string, ttl time.Duration) (kill func() error, err error) {
	exe, err := selfExe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "hold", "--url", rawURL, "--key", key, "--ttl", ttl.String(), "--max", "2m")
	cmd.Env = append(os.Environ(), runAsCLI+"=1")
	cmd.SysProcAttr = holderProcAttr()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	var once sync.Once
	kill = func() error {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = cmd.Wait()
		})
		return nil
	}
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- l
	}()
	select {
	case l := <-line:
		if strings.HasPrefix(l, "HELD ") {
			return kill, nil
		}
		kill()
		return nil, fmt.Errorf("holder process did not take the lock: %s", strings.TrimSpace(stderr.String()))
	case <-ctx.Done():
		kill()
		return nil, fmt.Errorf("holder process: %w", ctx.Err())
	}
}

// runAsCLI, set in a test binary's environment, makes it run the CLI
// instead of the tests (see TestMain), so selfExe works under go test.
const runAsCLI = "DISTLOCK_TEST_RUN_AS_CLI"
