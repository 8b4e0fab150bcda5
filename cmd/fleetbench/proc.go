package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat; it
// is 100 on every Linux this runs on.
const clockTicks = 100

// procCPU is the user+system CPU time a running process has used so far,
// read from /proc/PID/stat, so the harness can attribute CPU to the
// ClickHouse server and to fleetsim over one measured interval.
func procCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("cpu time of pid %d: %w", pid, err)
	}
	// The command name (field 2) may hold spaces; fields are counted from
	// the closing parenthesis.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("cpu time of pid %d: malformed /proc stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("cpu time of pid %d: malformed /proc stat", pid)
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("cpu time of pid %d: %w", pid, err)
	}
	return (ut + st) / clockTicks, nil
}

// procRSS is the current resident set of a running process in bytes.
func procRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("rss of pid %d: %w", pid, err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("rss of pid %d: %w", pid, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("rss of pid %d: no VmRSS", pid)
}

// cpuMeter measures the CPU a process uses between start and stop.
type cpuMeter struct {
	pid   int
	begin float64
}

func startCPU(pid int) *cpuMeter {
	m := &cpuMeter{pid: pid}
	m.begin, _ = procCPU(pid)
	return m
}

// stop returns the CPU seconds used since startCPU, NaN if unreadable.
func (m *cpuMeter) stop() float64 {
	end, err := procCPU(m.pid)
	if err != nil {
		return nan
	}
	return end - m.begin
}

// simProc is a fleetsim process this harness started.
type simProc struct {
	cmd    *exec.Cmd
	url    string
	stderr bytes.Buffer
	done   chan struct{}
}

// startSim runs bin/fleetsim with args plus a free loopback port and waits
// for its `fleetsim listening on URL` line.
func startSim(ctx context.Context, bin string, args ...string) (*simProc, error) {
	p := &simProc{done: make(chan struct{})}
	p.cmd = exec.Command(bin, append([]string{"--listen", "127.0.0.1:0"}, args...)...)
	p.cmd.Stderr = &p.stderr
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("start fleetsim: %w", err)
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "fleetsim listening on "); ok {
				lines <- strings.TrimSpace(u)
				break
			}
		}
		_, _ = io.Copy(io.Discard, out)
		close(lines)
	}()
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	select {
	case u, ok := <-lines:
		if ok {
			p.url = u
			return p, nil
		}
		<-p.done
		return nil, fmt.Errorf("fleetsim exited before listening: %s", strings.TrimSpace(p.stderr.String()))
	case <-time.After(60 * time.Second):
		p.stop()
		return nil, errors.New("fleetsim did not print its listening line within 60s")
	case <-ctx.Done():
		p.stop()
		return nil, context.Cause(ctx)
	}
}

func (p *simProc) pid() int { return p.cmd.Process.Pid }

// stop ends the process this harness started, by its PID: SIGTERM, then
// SIGKILL after a grace period.
func (p *simProc) stop() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// usage is what one measured child process cost.
type usage struct {
	wall      time.Duration
	user, sys float64
	maxRSS    int64 // bytes
	exitCode  int
	// via names where the figures came from.
	via string
}

// timeBinary is GNU time; when it is missing the figures come from the
// kernel's rusage of the child, which is the same source time reads.
const timeBinary = "/usr/bin/time"

// haveGNUTime reports whether /usr/bin/time is GNU time (it has -v).
func haveGNUTime() bool {
	out, err := exec.Command(timeBinary, "-V").CombinedOutput()
	return err == nil || bytes.Contains(out, []byte("GNU"))
}

// measured runs name args with stdout and stderr to logPath, under
// /usr/bin/time -v when useTime is set, and returns its cost. A non-zero
// exit is not an error here; the caller decides.
func measured(ctx context.Context, useTime bool, dir, logPath string, name string, args ...string) (usage, error) {
	var u usage
	logf, err := os.Create(logPath)
	if err != nil {
		return u, fmt.Errorf("log file: %w", err)
	}
	defer logf.Close()
	timeOut := filepath.Join(dir, "time-"+filepath.Base(logPath))
	var cmd *exec.Cmd
	if useTime {
		cmd = exec.CommandContext(ctx, timeBinary, append([]string{"-v", "-o", timeOut, name}, args...)...)
		u.via = "/usr/bin/time -v"
	} else {
		cmd = exec.CommandContext(ctx, name, args...)
		u.via = "wait4 rusage"
	}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	cmd.Stdout, cmd.Stderr = logf, logf
	began := time.Now()
	err = cmd.Run()
	u.wall = time.Since(began)
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return u, fmt.Errorf("run %s: %w", name, err)
	}
	u.exitCode = cmd.ProcessState.ExitCode()
	if !useTime {
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			u.maxRSS = ru.Maxrss << 10
			u.user = time.Duration(ru.Utime.Nano()).Seconds()
			u.sys = time.Duration(ru.Stime.Nano()).Seconds()
		}
		return u, nil
	}
	b, err := os.ReadFile(timeOut)
	if err != nil {
		return u, fmt.Errorf("read /usr/bin/time output: %w", err)
	}
	parseTimeV(b, &u)
	return u, nil
}

// parseTimeV reads the figures of GNU `time -v` output into u.
func parseTimeV(b []byte, u *usage) {
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), ": ")
		if !ok {
			continue
		}
		switch k {
		case "User time (seconds)":
			u.user, _ = strconv.ParseFloat(v, 64)
		case "System time (seconds)":
			u.sys, _ = strconv.ParseFloat(v, 64)
		case "Maximum resident set size (kbytes)":
			kb, _ := strconv.ParseInt(v, 10, 64)
			u.maxRSS = kb << 10
		case "Exit status":
			u.exitCode, _ = strconv.Atoi(v)
		}
	}
}

// tail is the last n bytes of a file, for error messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}

// machineMeter measures the CPU time the whole machine spends busy
// (user, nice, system, irq, softirq and the hypervisor's steal) over an
// interval, so the harness can tell how much of it went to processes it
// did not start.
type machineMeter struct{ begin float64 }

func machineCPU() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return nan
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return nan
	}
	var busy float64
	// user nice system idle iowait irq softirq steal
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		v, _ := strconv.ParseFloat(f[i], 64)
		busy += v
	}
	return busy / clockTicks
}

func startMachineCPU() *machineMeter { return &machineMeter{begin: machineCPU()} }

// stop returns the busy CPU seconds since startMachineCPU.
func (m *machineMeter) stop() float64 { return machineCPU() - m.begin }
