-- Give the lease up, only while this holder still has it (checked by the prelude).
redis.call('DEL', KEYS[1])
return reply({status = 'released'})
