-- Renew the lease, only while it still names this holder and epoch (checked by the prelude).
-- ARGV[3] ttl in milliseconds.
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return reply({status = 'renewed'})
