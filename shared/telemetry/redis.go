package telemetry

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// RedisHook makes each Redis command (a script's EVALSHA included) and
// each pipeline or transaction a client span under the span of its
// context; a command outside any recording span costs one context lookup.
type RedisHook struct{}

// DialHook dials as is.
func (RedisHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook traces one command.
func (RedisHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !trace.SpanFromContext(ctx).IsRecording() {
			return next(ctx, cmd)
		}
		op := strings.ToUpper(cmd.Name())
		ctx, span := Start(ctx, op, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
			attribute.String("db.system.name", "redis"), attribute.String("db.operation.name", op)))
		err := next(ctx, cmd)
		End(span, redisErr(err))
		return err
	}
}

// ProcessPipelineHook traces one pipeline or MULTI/EXEC as one span.
func (RedisHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !trace.SpanFromContext(ctx).IsRecording() {
			return next(ctx, cmds)
		}
		op := "PIPELINE"
		if len(cmds) > 0 && strings.EqualFold(cmds[0].Name(), "multi") {
			op = "MULTI"
		}
		ctx, span := Start(ctx, op, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
			attribute.String("db.system.name", "redis"), attribute.String("db.operation.name", op),
			attribute.Int("db.operation.batch.size", len(cmds))))
		err := next(ctx, cmds)
		End(span, redisErr(err))
		return err
	}
}

// redisErr is err unless it is an answer, not a failure (redis.Nil).
func redisErr(err error) error {
	if errors.Is(err, redis.Nil) {
		return nil
	}
	return err
}

var _ redis.Hook = RedisHook{}
