# Least privilege, one role per service, assumed by its Kubernetes service
# account (IRSA, deploy/k8s/base/serviceaccounts.yaml):
#
#   signer     s3:PutObject on <bucket>/incoming/* — what its presigned URLs
#              do; a URL is authorised with the signer's own credentials, so
#              this is also the most any URL can ever do. s3:PutObject also
#              authorises CreateMultipartUpload, UploadPart (the part URLs)
#              and CompleteMultipartUpload. For multipart uploads, on the
#              same objects: s3:AbortMultipartUpload (DELETE /uploads/{urlId}),
#              s3:ListMultipartUploadParts (listing the parts, and checking
#              them before a complete) and s3:GetObject (HeadObject: tells a
#              completed upload from an aborted one). s3:GetObject on
#              incoming/* also authorises the download URLs it mints
#              (POST /uploads/{urlId}/download, presigned GETs of completed
#              uploads): never on quarantine/*, so no URL it signs can read
#              a rejected upload's evidence. It signs PUTs, and GETs of
#              incoming/* only.
#              And s3:ListBucket on the bucket, as the completer and the
#              sweeper have it: without it S3 answers the HeadObject of a
#              missing object 403, not 404, and the multipart closer
#              (shared/multipart) could never tell an aborted upload from
#              an outage, so a DELETE or sweep interrupted after S3's
#              abort would never settle. Its presigned URLs are PUTs only,
#              so no URL can list.
#   completer  sqs:ReceiveMessage, sqs:DeleteMessage (which also authorises
#              DeleteMessageBatch), sqs:ChangeMessageVisibility (which also
#              authorises ChangeMessageVisibilityBatch: while Redis is down
#              it keeps the messages it holds invisible instead of letting
#              them be received again and pushed to the DLQ by an outage)
#              and sqs:GetQueueAttributes (its readiness check: a
#              ReceiveMessage used as a probe would hide a message) on the
#              one queue. A message it cannot parse is left to time out and,
#              in the end, to redrive. On the dead-letter queue, only
#              sqs:GetQueueUrl and sqs:GetQueueAttributes: it finds the DLQ
#              through the queue's RedrivePolicy and exports its depth
#              (mintgate_completer_dlq_messages); it never reads its messages.
#              The verification gate (completer/verify.go): s3:GetObject
#              on <bucket>/incoming/* (HeadObject, the ranged GET of an
#              object's first bytes, the scan's GET of at most
#              MINTGATE_SCAN_MAX_BYTES). The quarantine of a rejected
#              object (completer/reject.go): CopyObject into
#              <bucket>/quarantine/* (s3:PutObject there; it reads the
#              source with s3:GetObject on incoming/*), then s3:DeleteObject
#              on <bucket>/incoming/*; a redelivery whose copy finds no
#              source (an earlier delivery moved it and died) HEADs the
#              quarantined copy: s3:GetObject on <bucket>/quarantine/*.
#              And s3:ListBucket on the bucket, for one reason: without
#              it S3 answers a GET or HEAD of a missing object 403, not
#              404, and the completer tells "gone" (an object deleted
#              before its verdict, a quarantine already done) from an
#              outage by that 404; on a 403 it would hold the message
#              until the DLQ. It lists nothing itself, and it already
#              reads every object's bytes, so the keys' names tell it
#              nothing more. No write into incoming/, no delete in
#              quarantine/.
#   sweeper    s3:AbortMultipartUpload and s3:GetObject (HeadObject: tells a
#              completed upload from an aborted one) on <bucket>/incoming/*:
#              a multipart upload not completed by its grant's end is
#              aborted before its tokens go back; s3:ListBucket on the
#              bucket, for the 404 of a missing object (as the signer).

locals {
  oidc_issuer = trimprefix(var.eks_oidc_issuer, "https://")
}

data "aws_iam_policy_document" "signer_trust" {
  statement {
    sid     = "SignerServiceAccount"
    effect  = "Allow"
    actions = ["sts:AssumeRoleWithWebIdentity"]

    principals {
      type        = "Federated"
      identifiers = [var.eks_oidc_provider_arn]
    }

    condition {
      test     = "StringEquals"
      variable = "${local.oidc_issuer}:sub"
      values   = ["system:serviceaccount:${var.k8s_namespace}:mintgate-signer"]
    }

    condition {
      test     = "StringEquals"
      variable = "${local.oidc_issuer}:aud"
      values   = ["sts.amazonaws.com"]
    }
  }
}

data "aws_iam_policy_document" "signer" {
  # Also CreateMultipartUpload, UploadPart and CompleteMultipartUpload.
  statement {
    sid       = "PutIncomingObjects"
    effect    = "Allow"
    actions   = ["s3:PutObject"]
    resources = ["${aws_s3_bucket.uploads.arn}/incoming/*"]
  }

  # s3:GetObject: the multipart closer's HeadObject and every download
  # URL (presigned GET) — incoming/* only, never quarantine/*.
  statement {
    sid    = "ManageIncomingMultipartUploads"
    effect = "Allow"
    actions = [
      "s3:AbortMultipartUpload",
      "s3:ListMultipartUploadParts",
      "s3:GetObject",
    ]
    resources = ["${aws_s3_bucket.uploads.arn}/incoming/*"]
  }

  # A missing object answers 404 (NoSuchKey, NotFound), not 403: the
  # multipart closer's HeadObject tells an aborted upload by that 404.
  statement {
    sid       = "TellMissingObjects"
    effect    = "Allow"
    actions   = ["s3:ListBucket"]
    resources = [aws_s3_bucket.uploads.arn]
  }
}

resource "aws_iam_role" "signer" {
  name               = "${var.name_prefix}-signer"
  assume_role_policy = data.aws_iam_policy_document.signer_trust.json
}

resource "aws_iam_role_policy" "signer" {
  name   = "${var.name_prefix}-signer"
  role   = aws_iam_role.signer.id
  policy = data.aws_iam_policy_document.signer.json
}

data "aws_iam_policy_document" "completer_trust" {
  statement {
    sid     = "CompleterServiceAccount"
    effect  = "Allow"
    actions = ["sts:AssumeRoleWithWebIdentity"]

    principals {
      type        = "Federated"
      identifiers = [var.eks_oidc_provider_arn]
    }

    condition {
      test     = "StringEquals"
      variable = "${local.oidc_issuer}:sub"
      values   = ["system:serviceaccount:${var.k8s_namespace}:mintgate-completer"]
    }

    condition {
      test     = "StringEquals"
      variable = "${local.oidc_issuer}:aud"
      values   = ["sts.amazonaws.com"]
    }
  }
}

data "aws_iam_policy_document" "completer" {
  statement {
    sid    = "ConsumeUploadEvents"
    effect = "Allow"
    actions = [
      "sqs:ReceiveMessage",
      "sqs:DeleteMessage",
      "sqs:ChangeMessageVisibility",
      "sqs:GetQueueAttributes",
    ]
    resources = [aws_sqs_queue.uploads.arn]
  }

  statement {
    sid    = "WatchDeadLetterQueueDepth"
    effect = "Allow"
    actions = [
      "sqs:GetQueueUrl",
      "sqs:GetQueueAttributes",
    ]
    resources = [aws_sqs_queue.uploads_dlq.arn]
  }

  statement {
    sid    = "VerifyAndMoveUploads"
    effect = "Allow"
    actions = [
      "s3:GetObject",
      "s3:DeleteObject",
    ]
    resources = ["${aws_s3_bucket.uploads.arn}/incoming/*"]
  }

  # PutObject: CopyObject's destination; GetObject: HeadObject of the
  # quarantined copy when a redelivery finds the source already moved.
  statement {
    sid    = "QuarantineRejectedUploads"
    effect = "Allow"
    actions = [
      "s3:PutObject",
      "s3:GetObject",
    ]
    resources = ["${aws_s3_bucket.uploads.arn}/quarantine/*"]
  }

  # A missing object answers 404 (NoSuchKey, NotFound), not 403.
  statement {
    sid       = "TellMissingObjects"
    effect    = "Allow"
    actions   = ["s3:ListBucket"]
    resources = [aws_s3_bucket.uploads.arn]
  }
}

resource "aws_iam_role" "completer" {
  name               = "${var.name_prefix}-completer"
  assume_role_policy = data.aws_iam_policy_document.completer_trust.json
}

resource "aws_iam_role_policy" "completer" {
  name   = "${var.name_prefix}-completer"
  role   = aws_iam_role.completer.id
  policy = data.aws_iam_policy_document.completer.json
}

data "aws_iam_policy_document" "sweeper_trust" {
  statement {
    sid     = "SweeperServiceAccount"
    effect  = "Allow"
    actions = ["sts:AssumeRoleWithWebIdentity"]

    principals {
      type        = "Federated"
      identifiers = [var.eks_oidc_provider_arn]
    }

    condition {
      test     = "StringEquals"
      variable = "${local.oidc_issuer}:sub"
      values   = ["system:serviceaccount:${var.k8s_namespace}:mintgate-sweeper"]
    }

    condition {
      test     = "StringEquals"
      variable = "${local.oidc_issuer}:aud"
      values   = ["sts.amazonaws.com"]
    }
  }
}

data "aws_iam_policy_document" "sweeper" {
  statement {
    sid    = "AbortExpiredMultipartUploads"
    effect = "Allow"
    actions = [
      "s3:AbortMultipartUpload",
      "s3:GetObject",
    ]
    resources = ["${aws_s3_bucket.uploads.arn}/incoming/*"]
  }

  # A missing object answers 404 (NoSuchKey, NotFound), not 403: the
  # multipart closer's HeadObject tells an aborted upload by that 404.
  statement {
    sid       = "TellMissingObjects"
    effect    = "Allow"
    actions   = ["s3:ListBucket"]
    resources = [aws_s3_bucket.uploads.arn]
  }
}

resource "aws_iam_role" "sweeper" {
  name               = "${var.name_prefix}-sweeper"
  assume_role_policy = data.aws_iam_policy_document.sweeper_trust.json
}

resource "aws_iam_role_policy" "sweeper" {
  name   = "${var.name_prefix}-sweeper"
  role   = aws_iam_role.sweeper.id
  policy = data.aws_iam_policy_document.sweeper.json
}
