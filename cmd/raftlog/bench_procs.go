package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

// benchProc is one `raftlog serve` process of a bench cluster.
type benchProc struct {
	id          int
	kafka, http string
	cmd         *exec.Cmd
	exited      chan struct{}
	logf        *os.File
}

// startBenchProcs starts n `raftlog serve` processes of bin on loopback,
// each with its data and its output under dir, args added to their flags,
// and waits until each answers /readyz.
func startBenchProcs(ctx context.Context, bin string, n int, dir string, args []string) ([]*benchProc, error) {
	addrs := make([]string, 4*n) // kafka, raft, gossip, http of each node
	for i := range addrs {
		a, err := loopbackAddr()
		if err != nil {
			return nil, err
		}
		addrs[i] = a
	}
	var gossip []string
	for i := 0; i < n; i++ {
		gossip = append(gossip, addrs[4*i+2])
	}
	var procs []*benchProc
	fail := func(err error) ([]*benchProc, error) {
		for _, p := range procs {
			p.kill()
		}
		return nil, err
	}
	for i := 0; i < n; i++ {
		p := &benchProc{id: i + 1, kafka: addrs[4*i], http: addrs[4*i+3], exited: make(chan struct{})}
		nodeDir := filepath.Join(dir, fmt.Sprintf("node-%d", p.id))
		if err := os.MkdirAll(nodeDir, 0o755); err != nil {
			return fail(err)
		}
		logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("node-%d.log", p.id)))
		if err != nil {
			return fail(err)
		}
		p.logf = logf
		full := append([]string{"serve", "--node-id", fmt.Sprint(p.id), "--data-dir", nodeDir,
			"--kafka-addr", p.kafka, "--raft-addr", addrs[4*i+1], "--gossip-addr", addrs[4*i+2], "--http-addr", p.http,
			"--join", strings.Join(gossip, ","), "--controller-voters", fmt.Sprint(min(3, n)), "--expect-nodes", fmt.Sprint(n)}, args...)
		p.cmd = exec.Command(bin, full...)
		p.cmd.Stdout, p.cmd.Stderr = logf, logf
		if err := p.cmd.Start(); err != nil {
			logf.Close()
			return fail(fmt.Errorf("node %d: %w", p.id, err))
		}
		go func() {
			p.cmd.Wait()
			p.logf.Close()
			close(p.exited)
		}()
		procs = append(procs, p)
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, p := range procs {
		if err := p.awaitReady(wctx); err != nil {
			return fail(fmt.Errorf("node %d not ready (its output: %s): %w", p.id, p.logf.Name(), err))
		}
	}
	return procs, nil
}

func (p *benchProc) awaitReady(ctx context.Context) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.http+"/readyz", nil)
		if err != nil {
			return err
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.exited:
			return errors.New("it exited")
		case <-tick.C:
		}
	}
}

// kill ends the process with SIGKILL, as a crash would, and waits for it.
func (p *benchProc) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Kill()
	<-p.exited
}

// stop ends the process with SIGTERM and waits for it to exit, up to
// timeout (then it is killed and that is an error).
func (p *benchProc) stop(timeout time.Duration) error {
	p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.exited:
		return nil
	case <-t.C:
		p.kill()
		return fmt.Errorf("node %d did not stop within %v of SIGTERM", p.id, timeout)
	}
}

// stat is the process's /proc stat, nil once it exited.
func (p *benchProc) stat() *procfs.ProcStat {
	pr, err := procfs.NewProc(p.cmd.Process.Pid)
	if err != nil {
		return nil
	}
	st, err := pr.Stat()
	if err != nil {
		return nil
	}
	return &st
}

// cpu is the process's CPU time so far, in seconds (0 once it exited).
func (p *benchProc) cpu() float64 {
	if st := p.stat(); st != nil {
		return st.CPUTime()
	}
	return 0
}

// resident is the process's resident set in bytes.
func (p *benchProc) resident() uint64 {
	if st := p.stat(); st != nil {
		return uint64(st.ResidentMemory())
	}
	return 0
}

// procsCPU is the CPU time of the processes so far, in seconds.
func procsCPU(ps []*benchProc) float64 {
	var s float64
	for _, p := range ps {
		s += p.cpu()
	}
	return s
}

// fetchTo writes the body of a GET of url (on loopback) to path.
func fetchTo(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
