// Package kube pins the Kubernetes control-plane binaries that test/cluster
// builds: kube-apiserver, kube-controller-manager, kube-scheduler and kubectl,
// all at v1.37.2, with every staging module replaced by its published v0.37.2.
// It lives in its own module so that Limen's go.mod stays lean.
package kube
