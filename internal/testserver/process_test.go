package testserver_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tombstoneworks/communitydeletion/internal/testserver"
)

// helperEnv makes the test binary act as a test binary that starts a
// server and then waits to be killed.
const helperEnv = "TESTSERVER_WATCHDOG_HELPER_DIR"

// alive reports whether pid is a live (not zombie) process.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) STATE …; comm may hold spaces, so take the field after ")".
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndex(s, ")")+1:])
	return len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
}

// TestWatchdogKillsTheServerOfADeadTestBinary starts a "test binary" (this
// one, re-run as a helper) that starts a server, kills the helper with
// SIGKILL, and checks that the watchdog kills the server and removes its
// directory.
func TestWatchdogKillsTheServerOfADeadTestBinary(t *testing.T) {
	if dir := os.Getenv(helperEnv); dir != "" {
		p, err := testserver.StartProcess(testserver.ProcessOptions{Path: "/bin/sleep", Args: []string{"300"}, Dir: dir, RemoveDir: true})
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println(p.Pid())
		select {} // until killed
	}
	helper := exec.Command(os.Args[0], "-test.run=^TestWatchdogKillsTheServerOfADeadTestBinary$")
	serverDir := t.TempDir() + "/server"
	if err := os.Mkdir(serverDir, 0o755); err != nil {
		t.Fatal(err)
	}
	helper.Env = append(os.Environ(), helperEnv+"="+serverDir)
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = helper.Process.Kill()
		t.Fatalf("helper: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		_ = helper.Process.Kill()
		t.Fatalf("helper said %q", line)
	}
	if !alive(pid) {
		t.Fatalf("server %d is not running", pid)
	}
	if err := helper.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = helper.Wait()
	// The watchdog sees EOF as soon as the helper is gone; give it a
	// moment to act.
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("server %d outlived its test binary", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The watchdog removes the directory right after the kill.
	for {
		if _, err := os.Stat(serverDir); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server directory %s outlived its test binary", serverDir)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStopEndsTheServerAndTheWatchdog stops a server that ignores SIGTERM:
// Stop kills it after the grace period.
func TestStopEndsTheServerAndTheWatchdog(t *testing.T) {
	t.Parallel()
	p, err := testserver.StartProcess(testserver.ProcessOptions{
		Path: "/bin/sh", Args: []string{"-c", `trap "" TERM; echo ready; while :; do sleep 1; done`}, Dir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(p.LogTail(), "ready") { // the trap is set once it says so
		select {
		case <-p.Exited():
			t.Fatalf("exited early: %s", p.LogTail())
		case <-time.After(10 * time.Millisecond):
		}
	}
	start := time.Now()
	if err := p.Stop(200 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited():
	default:
		t.Fatal("Stop returned before the server exited")
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("stopped after %v, before the grace period, though it ignores SIGTERM", d)
	}
	if alive(p.Pid()) {
		t.Fatal("server still running")
	}
	if err := p.Stop(time.Second); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}
