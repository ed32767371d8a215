-- POST /v1/sagas/order-payment with a new Idempotency-Key (and order) on every request.
local counter = 0
local thread_tag = ""

function setup(thread)
    thread:set("tag", tostring(math.random(1, 1e9)))
end

function init(args)
    thread_tag = tag
end

request = function()
    counter = counter + 1
    local key = "bench-" .. thread_tag .. "-" .. counter
    local body = '{"orderId":"' .. key .. '","customerId":7,"amount":"49.90"}'
    return wrk.format("POST", "/v1/sagas/order-payment",
        {["Content-Type"] = "application/json", ["Idempotency-Key"] = key}, body)
end
