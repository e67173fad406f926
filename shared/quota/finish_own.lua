-- FinishOwn: Finish for a request that gives its grant back if the
-- completing write fails (a multipart create: without its grant record no
-- part can be signed). The idempotency record becomes done with the 201
-- body only while it is still this very request's in-flight mark; the grant
-- record is written in any case.
--
-- Such a request may give up on a FinishOwn that still runs later (a
-- stalled Redis runs what sat in its sockets), and Undo it meanwhile. In
-- either order nothing replays a grant that was given back: Undo first
-- freed the key, so this finds no mark of its own and writes no done
-- record; this first, Undo finds the done record of its own nonce and
-- deletes it (undo.lua). The grant record it leaves beside the refunded
-- marker names a grant that is over.
--
-- KEYS: FINISH_OWN_KEYS, the idempotency record and the grant record;
-- ARGV: FINISH_OWN (finish_own.go). Returns 1 when the record became done, 0
-- when it was left as it was.
local idem, grant = KEYS[FINISH_OWN_KEYS.idem], KEYS[FINISH_OWN_KEYS.grant]
local done = 0
local rec = redis.call('HMGET', idem, 'state', 'fp', 'nonce')
if rec[1] == 'pending' and rec[2] == ARGV[FINISH_OWN.fp] and rec[3] == ARGV[FINISH_OWN.nonce] then
  redis.call('HSET', idem, 'state', 'done', 'body', ARGV[FINISH_OWN.body])
  redis.call('PEXPIRE', idem, ARGV[FINISH_OWN.record_ttl])
  done = 1
end
redis.call('HSET', grant, 'expiresAt', ARGV[FINISH_OWN.expires_at], 'subject', ARGV[FINISH_OWN.subject])
if ARGV[FINISH_OWN.content_type] ~= '' then
  redis.call('HSET', grant, 'contentType', ARGV[FINISH_OWN.content_type], 'contentLength', ARGV[FINISH_OWN.content_length])
end
if ARGV[FINISH_OWN.filename] ~= '' then
  redis.call('HSET', grant, 'filename', ARGV[FINISH_OWN.filename])
end
if ARGV[FINISH_OWN.multipart] ~= '' then
  redis.call('HSET', grant, 'multipart', ARGV[FINISH_OWN.multipart])
end
redis.call('PEXPIRE', grant, ARGV[FINISH_OWN.grant_ttl])
return done
