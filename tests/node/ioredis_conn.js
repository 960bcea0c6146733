// The connection helper of a Node.js bot fleet, written the way such apps write it with
// ioredis 5: one place that turns settings into a client, with the reconnect policy the fleet
// relies on. ioredis_bot.js uses it for every connection it opens (main, blocking reader,
// subscriber, final verification).
//
// Settings: host, port, username, password (an empty username means legacy `AUTH password`,
// which is what ioredis sends when `username` is not set), db 0, name (CLIENT SETNAME),
// autoPipelining (default on).
//
// Policy:
// - retryStrategy: reconnect after 50, 100, ... ms, at most 2 s apart, forever (a bot never
//   gives up on its Redis); every call is counted in `stats.reconnectAttempts`.
// - reconnectOnError: READONLY (a failover turned our master into a replica) and MASTERDOWN
//   (a replica lost its master) make ioredis reconnect and resend the command (2); every such
//   error is counted in `stats.reconnectOnError`. Anything else is the app's to handle.
// - enableAutoPipelining: commands issued in the same tick go out in one write.

'use strict';

const Redis = require('ioredis');

/// Counters shared by every connection the helper makes (read by the bot's summary).
const stats = {
  reconnectAttempts: 0,
  reconnectOnError: 0,
  errorEvents: [],
};

const RECONNECT_ERRORS = ['READONLY', 'MASTERDOWN'];

function retryStrategy(times) {
  stats.reconnectAttempts += 1;
  return Math.min(times * 50, 2000);
}

function reconnectOnError(err) {
  if (RECONNECT_ERRORS.some((prefix) => err.message.startsWith(prefix))) {
    stats.reconnectOnError += 1;
    return 2;
  }
  return false;
}

/// The options every connection shares, from `settings` (see the top of the file).
function redisOptions(settings) {
  const options = {
    host: settings.host,
    port: settings.port,
    db: 0,
    connectionName: settings.name,
    retryStrategy,
    reconnectOnError,
    enableAutoPipelining: settings.autoPipelining !== false,
    // Fail a command instead of queueing it forever when the server is gone for good.
    maxRetriesPerRequest: 20,
  };
  if (settings.username) options.username = settings.username;
  if (settings.password) options.password = settings.password;
  return options;
}

/// Records an `error` event. ioredis emits one for every failed (re)connection attempt and
/// then retries on its own; the bot reports them all and the caller decides what they mean.
function watchErrors(client, label) {
  client.on('error', (err) => {
    stats.errorEvents.push(`${label}: ${err.message}`);
  });
  return client;
}

/// A single-node client (what the fleet points at the proxy).
function connect(settings, label) {
  return watchErrors(new Redis(redisOptions(settings)), label);
}

/// A cluster client seeded with the same address (for apps written for Redis Cluster).
function connectCluster(settings, label) {
  const { host, port, ...rest } = redisOptions(settings);
  const cluster = new Redis.Cluster([{ host, port }], {
    redisOptions: rest,
    clusterRetryStrategy: retryStrategy,
    enableAutoPipelining: rest.enableAutoPipelining,
  });
  return watchErrors(cluster, label);
}

module.exports = { connect, connectCluster, stats };
