// gpuserve.llm front (roles/front): a POST body is read here before any of it goes upstream. It must be
// JSON; no data: URL in it, and no string of a media part, may carry more than one media item
// (front_media_item_mib: a base64 data URL counts its decoded bytes); and a request may carry no more
// images and videos than the engine is set to take (vLLM's --limit-mm-per-prompt; llama-server has no
// such limit and no per-item cap of its own). A body that passes goes upstream as it came (an internal
// redirect: nginx sends the body it has read and streams the answer); one that does not is refused with a
// 400 that says what was wrong. A media part's URL must be a well-formed base64 data: URL, or an http(s) URL
// where llm_media_urls lets the engine fetch it: nothing else (a path or a file: URL names a file on the
// engine's host, which SGLang 0.5.5 opens; a malformed data: URL is a 500 there).
var fs = require('fs');

// Content parts by their "type", and by their key where a part has no type (vLLM reads both). Audio is
// checked for its size, not counted.
var KINDS = {image_url: 'image', input_image: 'image', image_pil: 'image', image_embeds: 'image',
             video_url: 'video', input_video: 'video', audio_url: 'audio', input_audio: 'audio', audio_embeds: 'audio'};
// The keys in the order vLLM 0.26.0 reads them where a part has no type or has a uuid (whatever its type then:
// _parse_chat_message_content_mm_part), the Responses API's input_image and input_video after.
var KEY_ORDER = ['image_url', 'image_pil', 'image_embeds', 'audio_embeds', 'audio_url', 'input_audio', 'video_url',
                 'input_image', 'input_video'];

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
function carried(s) {
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

// Why `data` (base64 after a data: URL's comma, or llama-server's multimodal_data) is not media; null when it
// may be. Decoded to count its bytes: a regular expression over megabytes exceeds PCRE's match limit in njs,
// and the decoder skips what is not base64, so a shorter result means such characters.
function notBase64(data) {
    if (data.length === 0) {
        return 'no data';
    }
    var pad = data.charAt(data.length - 1) === '=' ? (data.charAt(data.length - 2) === '=' ? 2 : 1) : 0;
    var equals = data.indexOf('=');
    var clean = data.length % 4 === 0 && (equals < 0 || equals >= data.length - pad)
        && Buffer.from(data, 'base64').length === data.length / 4 * 3 - pad;
    return clean ? null : 'data that is not base64';
}

// Why a media part's URL is not one this endpoint takes; null when it is. `allowed`: llm_media_urls, as
// 'data_only', 'any' or the domains, space-separated.
function urlProblem(url, allowed) {
    if (url.slice(0, 5).toLowerCase() === 'data:') {
        var comma = url.indexOf(',');
        if (comma < 0) {
            return 'a data: URL with no comma before its data';
        }
        if (!/^[a-z]+\/[a-z0-9.+-]+(;[a-z0-9.+-]+=[^;,]*)*;base64$/i.test(url.slice(5, comma))) {
            return 'a data: URL that is not base64: send data:<type>/<subtype>;base64,<data>';
        }
        var bad = notBase64(url.slice(comma + 1));
        return bad ? 'a data: URL with ' + bad : null;
    }
    var m = /^https?:\/\/(?:[^\/?#@]*@)?(\[[^\]]*\]|[^:\/?#]*)/i.exec(url);
    if (!m) {
        return 'neither a data: URL nor an http(s) URL';
    }
    if (allowed === 'any' || (allowed !== 'data_only' && allowed.split(' ').indexOf(m[1].toLowerCase()) >= 0)) {
        return null;
    }
    return 'a URL this endpoint does not fetch (llm_media_urls: ' + allowed + '): send the media as a base64 data: URL';
}

// Pillow's own limit (2 x Image.MAX_IMAGE_PIXELS): vLLM's and SGLang's image decoders refuse a larger image
// only after reading it, and SGLang 0.5.5 answers that with a 500.
var MAX_PIXELS = 178956970;

// [format, width, height] from an image's first bytes (PNG, GIF, WebP, JPEG), or null: enough of the data is
// decoded for the header only.
function imageSize(b64) {
    var b = Buffer.from(b64.slice(0, 174760), 'base64');
    var u32 = function(i) { return b.readUInt32BE(i); };
    var text = function(from, to) { return String.fromCharCode.apply(null, Array.from(b.slice(from, to))); };
    if (b.length >= 24 && u32(0) === 0x89504e47 && text(12, 16) === 'IHDR') {
        return ['PNG', u32(16), u32(20)];
    }
    if (b.length >= 10 && text(0, 4) === 'GIF8') {
        return ['GIF', b.readUInt16LE(6), b.readUInt16LE(8)];
    }
    if (b.length >= 30 && text(0, 4) === 'RIFF' && text(8, 12) === 'WEBP') {
        var chunk = text(12, 16);
        if (chunk === 'VP8X') {
            return ['WebP', 1 + b.readUIntLE(24, 3), 1 + b.readUIntLE(27, 3)];
        }
        if (chunk === 'VP8L') {
            var bits = b.readUInt32LE(21);
            return ['WebP', 1 + (bits & 0x3fff), 1 + ((bits >> 14) & 0x3fff)];
        }
        if (chunk === 'VP8 ') {
            return ['WebP', b.readUInt16LE(26) & 0x3fff, b.readUInt16LE(28) & 0x3fff];
        }
        return null;
    }
    if (b.length >= 4 && b[0] === 0xff && b[1] === 0xd8) {
        for (var i = 2; i + 9 < b.length && b[i] === 0xff;) {
            var marker = b[i + 1];
            if (marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc) {
                return ['JPEG', b.readUInt16BE(i + 7), b.readUInt16BE(i + 5)];
            }
            i += 2 + b.readUInt16BE(i + 2);
        }
    }
    return null;
}

// Why an image's data (base64) is too large to open; null when it is not, or its format is not read here.
function tooManyPixels(b64) {
    var size = imageSize(b64);
    if (size && size[1] * size[2] > MAX_PIXELS) {
        return 'a ' + size[0] + ' of ' + size[1] + ' x ' + size[2] + ' pixels: over ' + MAX_PIXELS
            + ' pixels, the most the engines\' image decoders open';
    }
    return null;
}

// [where, url, raw] of a media part's media: its URL (image_url, video_url, audio_url: a string or {url}) or
// raw base64 (input_audio.data; llama-server's multimodal_data items are strings of it).
function mediaOf(path, part) {
    if (typeof part === 'string') {
        return [[path, part, true]];
    }
    var out = [];
    ['image_url', 'video_url', 'audio_url'].forEach(function(key) {
        var v = part[key];
        if (typeof v === 'string') {
            out.push([path + '.' + key, v, false]);
        } else if (v !== null && typeof v === 'object' && typeof v.url === 'string') {
            out.push([path + '.' + key + '.url', v.url, false]);
        }
    });
    if (part.input_audio !== null && typeof part.input_audio === 'object' && typeof part.input_audio.data === 'string') {
        out.push([path + '.input_audio.data', part.input_audio.data, true]);
    }
    return out;
}

function kindOf(part) {
    if (part === null || typeof part !== 'object' || Array.isArray(part)) {
        return null;
    }
    if (typeof part.type === 'string' && (part.uuid === undefined || part.uuid === null)) {
        return KINDS[part.type] || null;
    }
    for (var i = 0; i < KEY_ORDER.length; i++) {
        if (part[KEY_ORDER[i]] !== undefined) {
            return KINDS[KEY_ORDER[i]];
        }
    }
    return null;
}

// The content parts a request's media can be in, each [path, part, kind]: chat's messages[].content[], the
// Responses API's input[] and input[].content[], and llama-server's completion prompts' multimodal_data[]
// (each item a media file: counted as an image).
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
            l[1].forEach(function(p, j) { out.push([l[0] + '[' + j + ']', p, kindOf(p)]); });
        }
    });
    var prompts = Array.isArray(doc.prompt) ? doc.prompt : [doc.prompt];
    prompts.forEach(function(p, i) {
        if (p && typeof p === 'object' && Array.isArray(p.multimodal_data)) {
            p.multimodal_data.forEach(function(item, j) {
                out.push(['prompt' + (Array.isArray(doc.prompt) ? '[' + i + ']' : '') + '.multimodal_data[' + j + ']',
                          item, 'image']);
            });
        }
    });
    return out;
}

// Where a value is, built only for a message: the walk keeps each value's parent and key, not its path (a
// path a value would copy its parent's: an array of many values under a long key would make the front build
// a string the key's length for each of them).
function pathOf(node) {
    var names = [];
    for (; node.parent; node = node.parent) {
        names.unshift(typeof node.key === 'number' ? '[' + node.key + ']' : '.' + node.key);
    }
    var path = (node.key || '') + names.join('');
    return path.charAt(0) === '.' ? path.slice(1) : path;
}

// [where, bytes] of the first string under `root` (any string: a media part) or, with onlyData, the first
// data: URL that carries more than `cap` bytes; null when none does.
function oversize(root, rootPath, cap, onlyData) {
    var stack = [{value: root, parent: null, key: rootPath}];
    while (stack.length) {
        var node = stack.pop();
        var value = node.value;
        if (typeof value === 'string') {
            if ((!onlyData || value.slice(0, 5).toLowerCase() === 'data:') && cap < value.length) {
                var bytes = carried(value);
                if (bytes > cap) {
                    return [pathOf(node), bytes];
                }
            }
        } else if (value !== null && typeof value === 'object') {
            var isArray = Array.isArray(value);
            var keys = Object.keys(value);
            for (var i = keys.length - 1; i >= 0; i--) {
                stack.push({value: value[keys[i]], parent: node, key: isArray ? i : keys[i]});
            }
        }
    }
    return null;
}

function problem(doc, limits) {
    var found = parts(doc);
    var over = oversize(doc, '', limits.itemBytes, true);
    for (var i = 0; !over && i < found.length; i++) {
        if (found[i][2]) {
            over = oversize(found[i][1], found[i][0], limits.itemBytes, false);
        }
    }
    if (over) {
        return over[0] + ' is ' + mib(over[1]) + ' (' + over[1] + ' bytes): over this endpoint\'s '
            + mib(limits.itemBytes) + ' a media item';
    }
    for (var j = 0; j < found.length; j++) {
        var part = found[j][1];
        if (found[j][2] && (typeof part === 'string' || (part !== null && typeof part === 'object'))) {
            var media = mediaOf(found[j][0], part);
            for (var k = 0; k < media.length; k++) {
                var ref = media[k][1];
                var why = media[k][2] ? notBase64(ref) : urlProblem(ref, limits.urls);
                if (!why && found[j][2] === 'image') {
                    why = tooManyPixels(media[k][2] ? ref : ref.slice(0, 5).toLowerCase() === 'data:'
                                        ? ref.slice(ref.indexOf(',') + 1) : '');
                }
                if (why) {
                    return media[k][0] + ' is ' + why;
                }
            }
        }
    }
    var counts = {image: 0, video: 0, audio: 0};
    found.forEach(function(p) {
        if (p[2]) {
            counts[p[2]] += 1;
        }
    });
    var many = [];
    ['image', 'video'].forEach(function(kind) {
        if (counts[kind] > limits[kind]) {
            many.push(counts[kind] + ' ' + kind + (counts[kind] > 1 ? 's' : ''));
        }
    });
    return many.length ? many.join(' and ') + ' in one request: ' + limits.why : null;
}

function check(r) {
    var text = bodyText(r);
    if (text === undefined || text.length === 0) {
        return refuse(r, 'the request has no body: send the request as JSON');
    }
    var v = r.variables;
    var cap = Number(v.gpuserve_media_item_bytes);
    var doc;
    try {
        doc = JSON.parse(text);
    } catch (e) {
        var why = String(e.message);
        if (!/too deep/i.test(why)) {
            return refuse(r, 'the request body is not JSON (' + why.slice(0, 120) + ')');
        }
        // njs reads JSON 32 levels deep; a deeper body (a deep tool or output schema) goes on unread when it
        // can carry no media: shorter than one item, and no media word, spelt out or escaped.
        if (text.length <= cap && !/image|video|audio|multimodal|\\u/i.test(text)) {
            return r.internalRedirect('@upstream');
        }
        return refuse(r, 'the request body nests JSON deeper than this front reads (njs: ' + why.slice(0, 80) + ')');
    }
    if (doc === null || typeof doc !== 'object' || Array.isArray(doc)) {
        return refuse(r, 'the request body is JSON but not an object');
    }
    var found = problem(doc, {itemBytes: cap, image: Number(v.gpuserve_media_images),
                              video: Number(v.gpuserve_media_videos), why: v.gpuserve_media_why,
                              urls: v.gpuserve_media_urls || 'data_only'});
    if (found) {
        return refuse(r, found);
    }
    r.internalRedirect('@upstream');
}

export default {check};
