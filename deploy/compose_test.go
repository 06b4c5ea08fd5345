package deploy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

func needDocker(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds an image")
	}
	if err := exec.Command("docker", "info").Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the Docker engine is needed under CI: %v", err)
		}
		t.Skip("no Docker engine")
	}
	if _, err := exec.LookPath("docker-compose"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("docker-compose is needed under CI: %v", err)
		}
		t.Skip("no docker-compose")
	}
}

func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, p, _ := net.SplitHostPort(ln.Addr().String())
	return p
}

// TestComposeCluster builds the FROM scratch image, starts the three-node
// compose cluster on its private network, produces and consumes from the
// host, stops one container while producing goes on, starts it again, and
// checks that nothing acknowledged is missing.
func TestComposeCluster(t *testing.T) {
	needDocker(t)
	tag := fmt.Sprintf("raftlog:test-%d", rand.IntN(1e9))
	out, err := exec.Command("bash", "image.sh", tag).CombinedOutput()
	if err != nil {
		t.Fatalf("image: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("docker", "rmi", "-f", tag).Run() })
	project := fmt.Sprintf("rltest%d", rand.IntN(1e9))
	ports := []string{freePort(t), freePort(t), freePort(t)}
	env := append(os.Environ(), "RAFTLOG_IMAGE="+tag, "RAFTLOG_PORT_1="+ports[0], "RAFTLOG_PORT_2="+ports[1], "RAFTLOG_PORT_3="+ports[2],
		"RAFTLOG_HTTP_PORT_1="+freePort(t), "RAFTLOG_HTTP_PORT_2="+freePort(t), "RAFTLOG_HTTP_PORT_3="+freePort(t))
	compose := func(args ...string) ([]byte, error) {
		cmd := exec.Command("docker-compose", append([]string{"-p", project, "-f", "docker-compose.yml"}, args...)...)
		cmd.Env = env
		return cmd.CombinedOutput()
	}
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := compose("logs", "--tail", "40")
			t.Logf("container logs:\n%s", logs)
		}
		compose("down", "-v", "--timeout", "20")
	})
	if out, err := compose("up", "-d"); err != nil {
		t.Fatalf("up: %v\n%s", err, out)
	}
	var seeds []string
	for _, p := range ports {
		seeds = append(seeds, "127.0.0.1:"+p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic("compose"),
		kgo.RecordRetries(1000), kgo.RecordDeliveryTimeout(60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for {
		_, err := adm.CreateTopic(ctx, 3, 3, nil, "compose")
		if err == nil || strings.Contains(err.Error(), kerr.TopicAlreadyExists.Message) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("create topic: %v", err)
		}
		time.Sleep(500 * time.Millisecond) // the cluster is forming: retry until the deadline
	}
	acked := map[string]bool{}
	produce := func(from, n int) {
		for i := from; i < from+n; i++ {
			v := fmt.Sprintf("c%04d", i)
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatalf("produce %s: %v", v, err)
			}
			acked[v] = true
		}
	}
	produce(0, 200)
	if out, err := compose("stop", "--timeout", "20", "raftlog-2"); err != nil {
		t.Fatalf("stop: %v\n%s", err, out)
	}
	produce(200, 200)
	if out, err := compose("start", "raftlog-2"); err != nil {
		t.Fatalf("start: %v\n%s", err, out)
	}
	produce(400, 100)
	cons, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics("compose"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	for len(acked) > 0 {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%d acknowledged records never read", len(acked))
		}
		fs.EachRecord(func(r *kgo.Record) { delete(acked, string(r.Value)) })
	}
}
