// gpuserve.llm front (roles/front): a POST body is read here before any of it goes upstream. It must be
// JSON, no string in it may be larger than one media item (front_media_item_mib: a data URL counts its
// decoded bytes), and a request may carry no more images and videos than the engine is set to take
// (vLLM's --limit-mm-per-prompt; llama-server has no such limit and no per-item cap of its own). A body
// that passes goes upstream as it came (an internal redirect: nginx sends the body it has read and
// streams the answer); one that does not is refused with a 400 that says what was wrong.
var fs = require('fs');

// Content parts by their "type", and by their key where a part has no type (vLLM reads both).
var KINDS = {image_url: 'image', input_image: 'image', image_pil: 'image', image_embeds: 'image',
             video_url: 'video', input_video: 'video'};

function refuse(r, message) {
    r.variables.gpuserve_path = '';
    r.headersOut['Content-Type'] = 'application/json';
    r.return(400, JSON.stringify({error: {message: message, type: 'invalid_request_error'}}) + '\n');
}

function bodyText(r) {
    try {
        return r.requestText;
    } catch (e) {
        // Bodies over client_body_buffer_size are in a temporary file.
        var file = r.variables.request_body_file;
        return file ? fs.readFileSync(file, 'utf8') : undefined;
    }
}

function mib(bytes) {
    return (bytes / 1048576).toFixed(1) + ' MiB';
}

// The bytes a string carries: a base64 data URL's decoded size, else its length.
function itemBytes(s) {
    if (s.slice(0, 5).toLowerCase() === 'data:') {
        var comma = s.indexOf(',');
        if (comma > 0 && /;base64$/i.test(s.slice(0, comma))) {
            var data = s.length - comma - 1;
            var pad = s.charAt(s.length - 1) === '=' ? (s.charAt(s.length - 2) === '=' ? 2 : 1) : 0;
            return Math.floor(data * 3 / 4) - pad;
        }
    }
    return s.length;
}

function kindOf(part) {
    if (part === null || typeof part !== 'object' || Array.isArray(part)) {
        return null;
    }
    if (typeof part.type === 'string') {
        return KINDS[part.type] || null;
    }
    for (var key in KINDS) {
        if (part[key] !== undefined) {
            return KINDS[key];
        }
    }
    return null;
}

// The content parts a request's media can be in: chat's messages[].content[], the Responses API's
// input[] and input[].content[].
function parts(doc) {
    var out = [];
    var lists = [];
    if (Array.isArray(doc.messages)) {
        doc.messages.forEach(function(m, i) { lists.push(['messages[' + i + '].content', m && m.content]); });
    }
    if (Array.isArray(doc.input)) {
        lists.push(['input', doc.input]);
        doc.input.forEach(function(m, i) { lists.push(['input[' + i + '].content', m && m.content]); });
    }
    lists.forEach(function(l) {
        if (Array.isArray(l[1])) {
            l[1].forEach(function(p, j) { out.push([l[0] + '[' + j + ']', p]); });
        }
    });
    return out;
}

function problem(doc, limits) {
    var stack = [[doc, '']];
    while (stack.length) {
        var top = stack.pop();
        var value = top[0], path = top[1];
        if (typeof value === 'string') {
            var bytes = itemBytes(value);
            if (bytes > limits.itemBytes) {
                return (path || 'the body') + ' is ' + mib(bytes) + ' (' + bytes + ' bytes): over this endpoint\'s '
                    + mib(limits.itemBytes) + ' a media item';
            }
        } else if (value !== null && typeof value === 'object') {
            var keys = Object.keys(value);
            for (var i = keys.length - 1; i >= 0; i--) {
                var k = keys[i];
                stack.push([value[k], Array.isArray(value) ? path + '[' + k + ']' : (path ? path + '.' : '') + k]);
            }
        }
    }
    var counts = {image: 0, video: 0};
    parts(doc).forEach(function(p) {
        var kind = kindOf(p[1]);
        if (kind) {
            counts[kind] += 1;
        }
    });
    var over = [];
    ['image', 'video'].forEach(function(kind) {
        if (counts[kind] > limits[kind]) {
            over.push(counts[kind] + ' ' + kind + (counts[kind] > 1 ? 's' : ''));
        }
    });
    return over.length ? over.join(' and ') + ' in one request: ' + limits.why : null;
}

function check(r) {
    var text = bodyText(r);
    if (text === undefined || text.length === 0) {
        return refuse(r, 'the request has no body: send the request as JSON');
    }
    var doc;
    try {
        doc = JSON.parse(text);
    } catch (e) {
        var why = String(e.message);
        return refuse(r, /too deep/i.test(why) ? 'the request body nests JSON deeper than this front reads (njs: '
                      + why.slice(0, 80) + ')' : 'the request body is not JSON (' + why.slice(0, 120) + ')');
    }
    if (doc === null || typeof doc !== 'object' || Array.isArray(doc)) {
        return refuse(r, 'the request body is JSON but not an object');
    }
    var v = r.variables;
    var found = problem(doc, {itemBytes: Number(v.gpuserve_media_item_bytes), image: Number(v.gpuserve_media_images),
                              video: Number(v.gpuserve_media_videos), why: v.gpuserve_media_why});
    if (found) {
        return refuse(r, found);
    }
    r.internalRedirect('@upstream');
}

export default {check};
