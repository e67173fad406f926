package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/arn"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// dlqEvery is how often the completer reads its dead-letter queue's depth.
const dlqEvery = 30 * time.Second

// dlqQueue is the SQS calls the DLQ watcher makes.
type dlqQueue interface {
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, opts ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
}

// depthAttributes are the attributes whose sum is a queue's depth: the
// messages waiting and those received but not yet deleted.
var depthAttributes = []types.QueueAttributeName{
	types.QueueAttributeNameApproximateNumberOfMessages,
	types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
}

// dlqWatcher exports the depth of the completer's dead-letter queue as
// mintgate_completer_dlq_messages, with no configuration of its own: every
// poll reads the queue's RedrivePolicy (so a policy added, changed or
// removed while the completer runs is followed), resolves the DLQ's URL
// with GetQueueUrl when its ARN is new, and reads the DLQ's depth.
//
// While the queue has no redrive policy the series is absent (an alert on
// it cannot fire) and that is logged once. A failed poll is counted as
// mintgate_completer_errors_total{op="dlq"} and logged once per streak of
// failures; the gauge keeps its last value meanwhile.
type dlqWatcher struct {
	q        dlqQueue
	queueURL string
	every    time.Duration // 0: dlqEvery
	m        *metrics
	log      *slog.Logger

	arn, url string // the dead-letter queue last found, "" before
	noPolicy bool   // "no redrive policy" was logged and still holds
	failing  bool   // the last poll failed
}

// run polls at once and then every w.every until ctx ends.
// dlqPollTimeout is the least time one poll of the DLQ's depth may take.
const dlqPollTimeout = 5 * time.Second

func (w *dlqWatcher) run(ctx context.Context) {
	every := cmp.Or(w.every, dlqEvery)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		// A poll may take its interval, and at least dlqPollTimeout: a
		// short interval (tests poll every few ms) must not turn a slow
		// answer into a failure.
		pctx, cancel := context.WithTimeout(ctx, max(every, dlqPollTimeout))
		err := w.poll(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		w.report(err)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// report counts and logs a failed poll; it logs the first failure of a
// streak only, and the recovery after one.
func (w *dlqWatcher) report(err error) {
	switch {
	case err != nil:
		w.m.errors.WithLabelValues(opDLQ).Inc()
		if !w.failing {
			w.log.Warn("reading the dead-letter queue's depth failed; mintgate_completer_dlq_messages keeps its last value", "err", err)
		}
		w.failing = true
	case w.failing:
		w.log.Info("reading the dead-letter queue's depth again")
		w.failing = false
	}
}

// poll reads the redrive policy, resolves the DLQ when it is new and sets
// the gauge to the DLQ's depth.
func (w *dlqWatcher) poll(ctx context.Context) error {
	target, err := w.redriveTarget(ctx)
	if err != nil {
		return err
	}
	if target == "" {
		w.m.dlqMessages.Reset()
		w.arn, w.url = "", ""
		if !w.noPolicy {
			w.log.Warn("the queue has no redrive policy: no dead-letter queue to watch, mintgate_completer_dlq_messages is not exported",
				"queue", w.queueURL)
			w.noPolicy = true
		}
		return nil
	}
	w.noPolicy = false
	if target != w.arn {
		url, err := w.resolve(ctx, target)
		if err != nil {
			return err
		}
		w.arn, w.url = target, url
		w.log.Info("watching the dead-letter queue's depth", "dlq", url, "every", cmp.Or(w.every, dlqEvery))
	}
	n, err := queueDepth(ctx, w.q, w.url)
	if err != nil {
		return err
	}
	w.m.dlqMessages.WithLabelValues().Set(float64(n))
	return nil
}

// redriveTarget is the deadLetterTargetArn of the queue's RedrivePolicy,
// "" when it has none.
func (w *dlqWatcher) redriveTarget(ctx context.Context) (string, error) {
	out, err := w.q.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(w.queueURL),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameRedrivePolicy},
	})
	if err != nil {
		return "", fmt.Errorf("queue's RedrivePolicy: %w", err)
	}
	policy := out.Attributes[string(types.QueueAttributeNameRedrivePolicy)]
	if policy == "" {
		return "", nil
	}
	// maxReceiveCount is a number or a string depending on who wrote the
	// policy; only the target is read.
	var p struct {
		Target string `json:"deadLetterTargetArn"`
	}
	if err := json.Unmarshal([]byte(policy), &p); err != nil {
		return "", fmt.Errorf("queue's RedrivePolicy %q: %w", policy, err)
	}
	return p.Target, nil
}

// resolve is the URL of the queue whose ARN is target: GetQueueUrl with
// the ARN's last segment as the name and its account as the owner.
func (w *dlqWatcher) resolve(ctx context.Context, target string) (string, error) {
	a, err := arn.Parse(target)
	if err != nil || a.Service != "sqs" || a.Resource == "" {
		return "", fmt.Errorf("RedrivePolicy deadLetterTargetArn %q is not an SQS queue's ARN", target)
	}
	in := &sqs.GetQueueUrlInput{QueueName: aws.String(a.Resource)}
	if a.AccountID != "" {
		in.QueueOwnerAWSAccountId = aws.String(a.AccountID)
	}
	out, err := w.q.GetQueueUrl(ctx, in)
	if err != nil {
		return "", fmt.Errorf("URL of dead-letter queue %s: %w", target, err)
	}
	return aws.ToString(out.QueueUrl), nil
}

// queueDepth is the messages of the queue at url, visible or not.
func queueDepth(ctx context.Context, q dlqQueue, url string) (int, error) {
	out, err := q.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: depthAttributes})
	if err != nil {
		return 0, fmt.Errorf("depth of queue %s: %w", url, err)
	}
	total := 0
	for _, a := range depthAttributes {
		v, ok := out.Attributes[string(a)]
		if !ok {
			return 0, fmt.Errorf("queue %s: no %s", url, a)
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, fmt.Errorf("queue %s: %s %q: %w", url, a, v, err)
		}
		total += n
	}
	return total, nil
}
