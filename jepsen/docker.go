package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Docker mode (--net docker): every node is a container of the raftlog
// image (FROM scratch, the static binary: deploy/image.sh builds it, no
// image is pulled) on a private Docker network made for the run, with its
// data directory and boot id file bind-mounted from the results folder,
// so the power-loss nemesis edits them as it does a local node's. A node
// process is `docker run --rm` attached to the container: it ends when
// the container does. Signals go through `docker kill -s`. Partitions
// enter the container's network namespace (nsenter) and add blackhole
// routes there, as in the netns mode.

type dockerNet struct {
	name, image string
	net         *netns // addresses and the cutter
}

func dockerUsable() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("docker mode needs root (nsenter for partitions)")
	}
	if err := exec.Command("docker", "info").Run(); err != nil {
		return fmt.Errorf("no Docker engine: %w", err)
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		return fmt.Errorf("docker mode needs nsenter: %w", err)
	}
	return nil
}

// newDockerNet builds the image and creates the network for n nodes.
func newDockerNet(n int) (*dockerNet, error) {
	if err := dockerUsable(); err != nil {
		return nil, err
	}
	pid := os.Getpid()
	d := &dockerNet{name: fmt.Sprintf("rlj%d", pid%100000), image: "raftlog:jepsen"}
	out, err := exec.Command("deploy/image.sh", d.image).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("build the image: %v: %s", err, out)
	}
	subnet := fmt.Sprintf("10.214.%d", pid%250)
	if out, err := exec.Command("docker", "network", "create", "--subnet", subnet+".0/24", d.name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("docker network create: %v: %s", err, out)
	}
	d.net = &netns{prefix: d.name, subnet: subnet, n: n, first: 11, cut: map[[2]int]bool{}}
	d.net.ipIn = func(i int, args ...string) error {
		pid, err := exec.Command("docker", "inspect", "-f", "{{.State.Pid}}", d.container(i)).Output()
		if err != nil {
			return fmt.Errorf("docker inspect %s: %w", d.container(i), err)
		}
		cmd := exec.Command("nsenter", append([]string{"-t", strings.TrimSpace(string(pid)), "-n", "ip"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("nsenter ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	return d, nil
}

func (d *dockerNet) container(i int) string { return fmt.Sprintf("%s-n%d", d.name, i) }

// command starts node nd's container with the serve flags args (whose
// data directory and boot id file are replaced by the mounts).
func (d *dockerNet) command(nd *pnode, args []string) (*exec.Cmd, error) {
	dir, err := filepath.Abs(nd.dir)
	if err != nil {
		return nil, err
	}
	boot, err := filepath.Abs(nd.bootFile)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// The image runs as 65532: it must own its data directory.
	if err := os.Chown(dir, 65532, 65532); err != nil {
		return nil, err
	}
	var flags []string
	for i := 1; i < len(args); i++ { // args[0] is "serve": the entrypoint has it
		switch args[i] {
		case "--data-dir":
			flags = append(flags, args[i], "/data")
			i++
		case "--boot-id-file":
			flags = append(flags, args[i], "/boot_id")
			i++
		default:
			flags = append(flags, args[i])
		}
	}
	run := []string{"run", "--rm", "--name", d.container(nd.id), "--network", d.name, "--ip", d.net.addr(nd.id),
		"--user", "65532:65532", "-v", dir + ":/data", "-v", boot + ":/boot_id:ro", d.image}
	return exec.Command("docker", append(run, flags...)...), nil
}

// signal sends a signal to node i's container.
func (d *dockerNet) signal(i int, sig string) {
	exec.Command("docker", "kill", "-s", sig, d.container(i)).Run()
}

// teardown removes the containers and the network.
func (d *dockerNet) teardown() {
	for i := 1; i <= d.net.n; i++ {
		exec.Command("docker", "rm", "-f", d.container(i)).Run()
	}
	exec.Command("docker", "network", "rm", d.name).Run()
}
