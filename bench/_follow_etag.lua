-- wrk script prefix (bench/longpoll.py's capacity): every request names, in If-None-Match,
-- the ETag of the last 200 any connection of this thread had, as a consumer polling a feed
-- that changes does. A fixed ETag would turn every conditional request after the first
-- publish into a 200.
local etag = nil

request = function()
  if etag ~= nil then
    wrk.headers["If-None-Match"] = etag
  end
  return wrk.format()
end

response = function(status, headers, body)
  if status == 200 then
    etag = headers["ETag"] or headers["etag"] or etag
  end
end
