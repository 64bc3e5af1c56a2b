// gpuserve.llm front (roles/front): the request's credential, never a key kept here.
// digest: the SHA-256 of the bearer token, as hex. The configuration maps digests to client names, so
// the front holds no client key, and the lookup's timing depends on a digest, which says nothing of
// a key that does not match (as comparing HMACs does).
// upstream: the Authorization the engine or the router gets instead: the internal key, from the
// container's environment (env GPUSERVE_UPSTREAM_KEY in the configuration), or nothing.
var crypto = require('crypto');

function digest(r) {
    var header = r.headersIn['Authorization'];
    if (!header) {
        return '';
    }
    var m = /^Bearer[ ]+([!-~]{1,512})$/.exec(header);
    if (!m) {
        return '';
    }
    return crypto.createHash('sha256').update(m[1]).digest('hex');
}

// peer: '1' when the bearer token is the router hosts' peer token, an HMAC of the internal key (another router
// host's check asking for this router's workers; the front lets that route be asked from the peers' addresses
// only), else ''. The internal key itself never goes to a peer: whoever answers at a peer's address learns
// only a token that reads the worker list.
var PEERS = 'gpuserve.llm router peers';

function peer(r) {
    var key = process.env.GPUSERVE_UPSTREAM_KEY || '';
    var given = digest(r);
    if (!key || !given) {
        return '';
    }
    var token = crypto.createHmac('sha256', key).update(PEERS).digest('hex');
    return given === crypto.createHash('sha256').update(token).digest('hex') ? '1' : '';
}

function upstream(r) {
    var key = process.env.GPUSERVE_UPSTREAM_KEY || '';
    return key ? 'Bearer ' + key : '';
}

export default {digest, peer, upstream};
