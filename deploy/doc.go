// Package deploy holds the deployment files of raftlog (Dockerfile,
// docker-compose.yml, Kubernetes manifests) and the tests that build the
// image and run the compose cluster.
package deploy
