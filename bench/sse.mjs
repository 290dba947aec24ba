// Server-sent events for the benchmark clients (load_gen.mjs, prefix_cache_client.mjs): the
// data of the complete events a streamed response has delivered so far.

// Takes the complete events ("...\n\n") off the front of `buf`: `payloads`, the trimmed
// text of each of their `data:` lines in order, and `rest`, the start of an event still
// arriving.
export function takeSseData(buf) {
  const payloads = [];
  let sep;
  while ((sep = buf.indexOf('\n\n')) >= 0) {
    const event = buf.slice(0, sep);
    buf = buf.slice(sep + 2);
    for (const line of event.split('\n')) {
      if (line.startsWith('data:')) payloads.push(line.slice(5).trim());
    }
  }
  return { payloads, rest: buf };
}
