package kube

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/websummoner/websummoner/internal/logtag"
)

// syncTimeout bounds Prepare's wait for the informer's first list: a hub
// whose API server is down starts anyway, answering 500 with Retry-After until it is up.
const syncTimeout = 10 * time.Second

// Prepare asks the API server, starts the informer over this instance's pods
// and, once it has listed them, deletes what an earlier run of this instance
// left. The hub calls it before it announces itself.
func (l *Launcher) Prepare(ctx context.Context) {
	l.checkHealth(ctx)
	l.factory.Start(ctx.Done())
	sctx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	if cache.WaitForCacheSync(sctx.Done(), l.informer.HasSynced) && l.health.Up() {
		l.sweep(ctx, true)
	}
}

// Watch follows the API server's health and runs the periodic sweep until ctx
// ends; the informer started by Prepare reports pods that end or go.
func (l *Launcher) Watch(ctx context.Context) {
	l.health.Tend(ctx, l.opts.HealthInterval, l.opts.SweepInterval, l.checkHealth,
		func(ctx context.Context) { l.sweep(ctx, false) }, nil)
}

// Ready reports whether browsers can be started now.
func (l *Launcher) Ready() (bool, string) { return l.health.Ready() }

// checkHealth asks the API server for one of this instance's pods: what the
// hub may do (its Role covers pods only) and what it needs to work.
func (l *Launcher) checkHealth(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := l.client.CoreV1().Pods(l.opts.Namespace).List(pctx, metav1.ListOptions{LabelSelector: l.selector(), Limit: 1})
	if err != nil && !apierrors.IsForbidden(err) {
		l.health.MarkDown(err)
		return
	}
	if err != nil {
		// It answers, but the hub may not list pods: every start will say
		// so; the start gate need not back off.
		logtag.Event(l.log, slog.LevelWarn, "", "KUBERNETES_FORBIDDEN", err, "grant the hub's service account the Role of deploy/kubernetes/websummoner.yaml")
	}
	l.health.MarkUp("namespace " + l.opts.Namespace)
}

// observe hands a word of a pod from the informer to its instance.
func (l *Launcher) observe(obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, deleted = d.Obj, true
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	l.mu.Lock()
	inst := l.pods[pod.Name]
	l.mu.Unlock()
	if inst != nil {
		inst.see(pod, deleted)
	}
}

// sweep deletes pods of this instance that no live session owns. At
// start-up (all) every pod of the instance goes: they are an earlier run's.
func (l *Launcher) sweep(ctx context.Context, all bool) int {
	list, err := l.client.CoreV1().Pods(l.opts.Namespace).List(ctx, metav1.ListOptions{LabelSelector: l.selector()})
	if err != nil {
		logtag.Event(l.log, slog.LevelWarn, "", "SWEEP_FAILED", err)
		return 0
	}
	n := 0
	for _, p := range list.Items {
		l.mu.Lock()
		owned := l.pods[p.Name] != nil
		l.mu.Unlock()
		if (owned && !all) || p.DeletionTimestamp != nil {
			continue
		}
		dctx, cancel := context.WithTimeout(ctx, l.opts.StopTimeout)
		err := l.deletePod(dctx, p.Name)
		cancel()
		if err == nil || apierrors.IsNotFound(err) {
			n++
		}
	}
	if n > 0 {
		why := "no live session owns them"
		if all {
			why = "left by an earlier run of instance " + l.opts.Instance
		}
		logtag.Event(l.log, slog.LevelInfo, "", "PODS_DELETED", strconv.Itoa(n), why)
	}
	return n
}

// SweepAll deletes every pod of this instance (start-up and shutdown).
func (l *Launcher) SweepAll(ctx context.Context) int { return l.sweep(ctx, true) }

// Sweep deletes pods of this instance that no live session owns.
func (l *Launcher) Sweep(ctx context.Context) int { return l.sweep(ctx, false) }
